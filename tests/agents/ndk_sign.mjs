// NDK's own signing, as its NIP-46 bunker does it (NDKNip46Backend's sign_event: a new NDKEvent
// of the template, then event.sign), without the relays: for the tests that check that what
// nostr-buzz builds is what NDK signs (NDK tags the references in the text as it signs).
//
//   echo '[{"kind":9,"content":"…","tags":[],"created_at":1}]' | node ndk_sign.mjs
//
// It prints the signed events as one JSON array.
import NDK, { NDKEvent, NDKPrivateKeySigner } from "@nostr-dev-kit/ndk";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const ndk = new NDK();
const signer = NDKPrivateKeySigner.generate();
const out = [];
for (const template of JSON.parse(input)) {
  const event = new NDKEvent(ndk, template);
  await event.sign(signer);
  out.push(event.rawEvent());
}
process.stdout.write(JSON.stringify(out), () => process.exit(0));
