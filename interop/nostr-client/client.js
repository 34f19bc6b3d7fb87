// client.js: a client someone else wrote (nostr-tools) against a relay,
// for the interop test of `archiver serve`. It reads one JSON object on
// stdin, {"url": ..., "filter": {...}, "have": [{"id": hex, "created_at": n}]},
// and prints one on stdout:
//   events: ids of a REQ of filter, in arrival order (nostr-tools checks
//           each signature and the filter before handing an event over)
//   count:  the relay's NIP-45 COUNT of filter
//   need, have: what nostr-tools' NIP-77 client learns syncing filter
//           with the relay from the set "have"
//   negClose: the reason its sync ended with, if any (NEG-ERR included)
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay'
import { nip77 } from 'nostr-tools'
import WebSocket from 'ws'

useWebSocketImplementation(WebSocket)

const chunks = []
for await (const c of process.stdin) chunks.push(c)
const input = JSON.parse(Buffer.concat(chunks).toString())

const relay = await Relay.connect(input.url)
const out = { events: [], need: [], have: [] }

await new Promise((resolve) => {
  const sub = relay.subscribe([input.filter], {
    onevent: (e) => out.events.push(e.id),
    oneose: () => {
      sub.close()
      resolve()
    },
  })
})

out.count = await relay.count([input.filter], {})

const storage = new nip77.NegentropyStorageVector()
for (const it of input.have) storage.insert(it.created_at, it.id)
storage.seal()
await new Promise((resolve) => {
  const sync = new nip77.NegentropySync(relay, storage, input.filter, {
    onhave: (id) => out.have.push(id),
    onneed: (id) => out.need.push(id),
    onclose: (reason) => {
      if (reason !== undefined) out.negClose = String(reason)
      resolve()
    },
  })
  sync.start()
})

relay.close()
// Exit once written: a pipe is written asynchronously, and the socket
// would keep node running.
process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0))
