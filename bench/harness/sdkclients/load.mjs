// Sends an open-loop burst of completion calls with a real client library,
// configured as a new user would (no Idempotency-Key, the library's own
// retries), and prints one JSON line of what the calls got.
//
// Usage: node load.mjs '<json>' with
//   client      "openai" (the OpenAI Node SDK) or "vercel" (the AI SDK with @ai-sdk/openai)
//   url, key    the server's base URL (without /v1) and the bearer key
//   model       the model name
//   warmRate, warmSeconds   calls per second, evenly spaced, for a first phase
//   rate, seconds           then the burst's
//   timeoutMs   the client's timeout per attempt (OpenAI SDK) or per call (AI SDK: an abort)
//   maxRetries  the client's retries
//   promptChars, maxTokens   each call's size; prompts differ per call
//   stream      streamed calls when true
//   seed        makes the prompts differ between runs of one test
//   patienceMs  calls unfinished this long after the first one started count as "unfinished"
// It prints the calls and those delivered, all and the burst's alone.
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';

const cfg = JSON.parse(process.argv[2]);

function prompt(i) {
  const head = `call ${cfg.seed}-${i}: `;
  return head + 'x'.repeat(Math.max(0, cfg.promptChars - head.length));
}

function openaiCall() {
  const client = new OpenAI({ baseURL: cfg.url + '/v1', apiKey: cfg.key, timeout: cfg.timeoutMs, maxRetries: cfg.maxRetries });
  return async (i) => {
    const params = { model: cfg.model, prompt: prompt(i), max_tokens: cfg.maxTokens };
    if (!cfg.stream) {
      await client.completions.create(params);
      return;
    }
    const s = await client.completions.create({ ...params, stream: true });
    for await (const _ of s) {
      // drain
    }
  };
}

function vercelCall() {
  const provider = createOpenAI({ baseURL: cfg.url + '/v1', apiKey: cfg.key });
  const model = provider.completion(cfg.model);
  return async (i) => {
    const opts = { model, prompt: prompt(i), maxOutputTokens: cfg.maxTokens, maxRetries: cfg.maxRetries,
      abortSignal: AbortSignal.timeout(cfg.timeoutMs) };
    if (!cfg.stream) {
      await generateText(opts);
      return;
    }
    let err;
    const r = streamText({ ...opts, onError: ({ error }) => { err = error; } });
    for await (const _ of r.textStream) {
      // drain
    }
    if (err) throw err;
  };
}

const call = cfg.client === 'openai' ? openaiCall() : vercelCall();
const arrivals = [];
const warmN = Math.round((cfg.warmRate || 0) * (cfg.warmSeconds || 0));
for (let i = 0; i < warmN; i++) arrivals.push((i * 1000) / cfg.warmRate);
const burstAt = (cfg.warmSeconds || 0) * 1000;
for (let i = 0; i < Math.round(cfg.rate * cfg.seconds); i++) arrivals.push(burstAt + (i * 1000) / cfg.rate);
const n = arrivals.length;
const start = Date.now();
const failures = {};
const latencies = [];
let delivered = 0;
let burstDelivered = 0; // of the burst's calls, the warm phase's aside

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pending = [];
for (let i = 0; i < n; i++) {
  const at = start + arrivals[i];
  const wait = at - Date.now();
  if (wait > 0) await sleep(wait);
  const t0 = Date.now();
  pending.push(call(i).then(() => {
    delivered++;
    if (i >= warmN) burstDelivered++;
    latencies.push(Date.now() - t0);
  }, (e) => {
    const name = (e && (e.status ? `${e.constructor.name} ${e.status}` : e.name)) || 'unknown';
    failures[name] = (failures[name] || 0) + 1;
  }));
}
let timer;
const patience = new Promise((r) => { timer = setTimeout(r, Math.max(0, start + cfg.patienceMs - Date.now())); });
let finished = 0;
await Promise.race([Promise.all(pending.map((p) => p.then(() => { finished++; }))), patience]);
clearTimeout(timer);
if (finished < n) failures.unfinished = n - finished;
latencies.sort((a, b) => a - b);
const q = (p) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] : 0);
console.log(JSON.stringify({ client: cfg.client, calls: n, delivered, burstCalls: n - warmN, burstDelivered,
  failures, p50Ms: q(0.5), p99Ms: q(0.99),
  wallMs: Date.now() - start }));
process.exit(0); // calls still unfinished are abandoned
