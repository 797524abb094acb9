// One conformance scenario with the openai Node SDK's realtime client, as its users write it.
//
//   node realtime.mjs '{"baseURL": "https://127.0.0.1:PORT/v1", "apiKey": "...", "scenario": "spoken-turn",
//                       "speech": {"question": "/tmp/q.pcm", ...}}'
//
// The SDK dials wss:// whatever the base URL says, so the server must speak TLS; the test CA
// comes in through NODE_EXTRA_CA_CERTS. Prints one JSON object: every server event (audio
// deltas as their byte count) and every error the SDK raised to its `error` listener.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const args = JSON.parse(process.argv[2]);
const events = [];
const errors = [];
const client = new OpenAI({ apiKey: args.apiKey, baseURL: args.baseURL });
const rt = await OpenAIRealtimeWS.create(client, { model: 'gpt-realtime' });

rt.on('event', (event) => {
  if (event.type === 'response.output_audio.delta') {
    events.push({ ...event, delta: Buffer.from(event.delta, 'base64').length });
  } else {
    events.push(event);
  }
});
rt.on('error', (err) => errors.push({ message: err.message, error: err.error ?? null }));

let finished = false;
function finish(code) {
  if (finished) return;
  finished = true;
  process.stdout.write(JSON.stringify({ events, errors }));
  rt.close();
  setTimeout(() => process.exit(code), 100);
}
setTimeout(() => finish(3), 150_000);

function waitFor(predicate, from = 0) {
  return new Promise((resolve) => {
    const poll = () => {
      const found = events.slice(from).find(predicate);
      if (found) resolve(found);
      else setTimeout(poll, 20);
    };
    poll();
  });
}

// A microphone: 20 ms of 24 kHz PCM16 every 20 ms, the queued speech first, silence between.
const queue = [];
let microphone = null;
function say(name) {
  queue.push(readFileSync(args.speech[name]));
  if (microphone) return;
  const chunk = 960;
  const started = Date.now();
  let sent = 0;
  let pending = Buffer.alloc(0);
  const tick = () => {
    if (pending.length === 0 && queue.length) pending = queue.shift();
    const piece = Buffer.alloc(chunk);
    pending.copy(piece, 0, 0, Math.min(chunk, pending.length));
    pending = pending.subarray(Math.min(chunk, pending.length));
    rt.send({ type: 'input_audio_buffer.append', audio: piece.toString('base64') });
    sent += 1;
    microphone = setTimeout(tick, Math.max(0, started + sent * 20 - Date.now()));
  };
  tick();
}

const scenarios = {
  'spoken-turn': async () => {
    say('question');
    await waitFor((e) => e.type === 'response.done');
  },
  'barge-in': async () => {
    say('long');
    const first = await waitFor((e) => e.type === 'response.output_audio.delta');
    const mark = events.length;
    say('interruption');
    await waitFor((e) => e.type === 'response.done' && e.response.id === first.response_id);
    await waitFor((e) => e.type === 'response.done' && e.response.status === 'completed', mark);
  },
  'text-turn': async () => {
    rt.send({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: args.text }] },
    });
    rt.send({ type: 'response.create' });
    await waitFor((e) => e.type === 'response.done');
  },
  'unknown-item': async () => {
    rt.send({ type: 'conversation.item.retrieve', item_id: 'item_nope', event_id: 'evt_retrieve' });
    rt.send({ type: 'conversation.item.delete', item_id: 'item_nope', event_id: 'evt_delete' });
    await waitFor((e) => e.type === 'error' && e.error.event_id === 'evt_delete');
    rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'be brief' } });
    await waitFor((e) => e.type === 'session.updated');
  },
  'idle-cancel': async () => {
    rt.send({ type: 'response.cancel', event_id: 'evt_cancel' });
    await waitFor((e) => e.type === 'error');
  },
};

rt.socket.on('open', async () => {
  await waitFor((e) => e.type === 'session.created');
  await scenarios[args.scenario]();
  clearTimeout(microphone);
  finish(0);
});
rt.socket.on('close', () => finish(errors.length ? 2 : 4));
