// A NIP-46 remote signer ("bunker") that is not nostr-buzz's code: NDK's NDKNip46Backend,
// pinned in package.json, for the tests of nostr_buzz.io.nip46 and of `buzz run --bunker`.
//
//   BUNKER_KEY=<64-hex user key> BUNKER_SECRET=<connection secret> \
//     node nip46_bunker.mjs ws://127.0.0.1:PORT [ws://…]
//
// It holds the key (the remote-signer key and the user key are the same here, as in NDK), and
// answers the clients that sent `connect` with the secret (once: a secret is good for one
// connection, NIP-46) and no one else.  It prints one line `ready <pubkey hex>` on stdout once
// its subscription is live on every relay, and one line per request it answered
// (`answered <method>`), so that a test can wait on what it did.  Relays that ask for NIP-42
// AUTH get it, signed with the same key (NDK 3.0.3 authenticates its subscriptions, but a
// publish refused with auth-required is not sent again after AUTH: its answers time out on a
// relay that requires AUTH for writing).
import NDK, {
  NDKNip46Backend,
  NDKPrivateKeySigner,
  NDKRelayAuthPolicies,
} from "@nostr-dev-kit/ndk";
import WebSocket from "ws";

// Node 20 has no global WebSocket; NDK expects one.
globalThis.WebSocket ??= WebSocket;

const relays = process.argv.slice(2);
const key = process.env.BUNKER_KEY;
const secret = process.env.BUNKER_SECRET || null;
if (!relays.length || !key) {
  console.error("usage: BUNKER_KEY=HEX [BUNKER_SECRET=S] node nip46_bunker.mjs RELAY...");
  process.exit(2);
}

const signer = new NDKPrivateKeySigner(key);
// Only the relays given: no outbox model (NDK would dial its default public relays) and no
// user relay lists.
const ndk = new NDK({
  explicitRelayUrls: relays,
  signer,
  enableOutboxModel: false,
  autoConnectUserRelays: false,
});
ndk.relayAuthDefaultPolicy = NDKRelayAuthPolicies.signIn({ ndk, signer });

const allowed = new Set(); // client pubkeys that connected with the secret
let secretUsed = false;

const backend = new NDKNip46Backend(ndk, signer, async ({ pubkey }) => allowed.has(pubkey), relays);
// NDK hands `connect`'s secret to applyToken before it asks the permit callback.
backend.applyToken = async (pubkey, token) => {
  if (secret === null || token !== secret || secretUsed) throw new Error("invalid secret");
  secretUsed = true;
  allowed.add(pubkey);
};
const handle = backend.handleIncomingEvent.bind(backend);
backend.handleIncomingEvent = async (event) => {
  await handle(event);
  try {
    const { method } = await backend.rpc.parseEvent(event);
    console.log(`answered ${method}`);
  } catch {
    // not a request we could read: NDK ignored it too
  }
};

// Not awaited: NDK's connect() resolves only at its timeout here; the subscription below goes
// out as each relay connects, and `ready` waits for its EOSE.
ndk.connect();
const user = await signer.user();
backend.localUser = user;
// backend.start(), but `ready` waits for the relays' EOSE: from then on they pass requests on.
ndk.subscribe(
  { kinds: [24133], "#p": [user.pubkey] },
  {
    closeOnEose: false,
    onEvent: (event) => backend.handleIncomingEvent(event),
    onEose: () => console.log(`ready ${user.pubkey}`),
  },
);
process.on("SIGTERM", () => process.exit(0));
