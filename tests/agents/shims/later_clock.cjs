// Preloaded into an adapter (NODE_OPTIONS=--require …) to start it as if LATER_CLOCK_MS
// milliseconds had passed: Date.now() and new Date() run that far ahead.  The session-resume
// test uses it to restart gemini-cli "a minute later" (docs/acp-adapters.md, "Sessions that
// survive a restart": gemini-cli names its session file by the minute).
"use strict";
const shift = Number(process.env.LATER_CLOCK_MS || "0");
const RealDate = Date;
class LaterDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(RealDate.now() + shift);
    else super(...args);
  }
  static now() {
    return RealDate.now() + shift;
  }
}
globalThis.Date = LaterDate;
