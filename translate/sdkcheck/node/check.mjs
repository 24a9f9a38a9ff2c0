// The official Node SDKs judge Troupe's translated streams: every client
// transcript in the directories given (stream-*.to-<client>.sse: package
// translate's golden ones, and those TestStreamProperty writes with
// -dump-streams) is served from 127.0.0.1 to the SDK of its client protocol, whose stream
// helper accumulates it (openai: chat.completions.stream and
// responses.stream; @anthropic-ai/sdk: messages.stream). A stream must be
// accepted whole — every tool call with an id, a name and JSON arguments —
// or, when it ends in an error event, rejected with the SDK's API error.
// Usage: node check.mjs <dir>…. Exit status 1 on any failure. It
// needs no network: the SDKs talk to the local server only. Run by
// `make sdk-node` (part of `make test`), which installs the pinned SDKs
// (package-lock.json) into .cache/sdkcheck-node.
import { createServer } from 'node:http';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const dirs = process.argv.slice(2);
if (dirs.length === 0) {
  console.error('usage: node check.mjs <dir>…');
  process.exit(2);
}

let body = Buffer.alloc(0);
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(body);
  });
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'k', maxRetries: 0, timeout: 10000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'k', maxRetries: 0, timeout: 10000 });

// isError reports whether a client stream ends in its protocol's error.
function isError(client, text) {
  switch (client) {
    case 'chat':
      return /^data: \{"error":/m.test(text);
    case 'responses':
      return /^event: response\.failed$/m.test(text);
    default:
      return /^event: error$/m.test(text);
  }
}

function checkArgs(what, id, name, args) {
  if (!id || !name) throw new Error(`${what}: tool call id ${JSON.stringify(id)} name ${JSON.stringify(name)}`);
  JSON.parse(args); // throws on invalid JSON
}

// judge reads one client stream with its SDK; it throws what the SDK threw
// or a description of what is wrong.
async function judge(client) {
  switch (client) {
    case 'chat': {
      const s = openai.chat.completions.stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
      const c = await s.finalChatCompletion();
      const ch = c.choices[0];
      if (!ch || !ch.finish_reason) throw new Error('no finish_reason');
      for (const tc of ch.message.tool_calls ?? []) checkArgs('chat', tc.id, tc.function.name, tc.function.arguments);
      return `${ch.finish_reason}, ${(ch.message.tool_calls ?? []).length} calls`;
    }
    case 'responses': {
      const s = openai.responses.stream({ model: 'm', input: 'hi' });
      const r = await s.finalResponse();
      for (const it of r.output) {
        if (it.type === 'function_call') checkArgs('responses', it.call_id, it.name, it.arguments);
      }
      if (!r.usage) throw new Error('no usage');
      return `${r.status}, ${r.output.length} items`;
    }
    default: {
      const s = anthropic.messages.stream({ model: 'm', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] });
      const m = await s.finalMessage();
      for (const b of m.content) {
        if (b.type === 'tool_use') checkArgs('messages', b.id, b.name, JSON.stringify(b.input));
        if (b.type === 'tool_use' && (typeof b.input !== 'object' || b.input === null || Array.isArray(b.input)))
          throw new Error(`tool_use ${b.id} input is not an object`);
      }
      if (!m.stop_reason || !m.usage) throw new Error('no stop_reason or usage');
      return `${m.stop_reason}, ${m.content.length} blocks`;
    }
  }
}

const files = dirs.flatMap((d) =>
  readdirSync(d).filter((f) => /^stream-.*\.to-(chat|responses|messages)\.sse$/.test(f)).sort().map((f) => join(d, f)));
if (files.length === 0) {
  console.error(`no client transcripts in ${dirs.join(', ')}`);
  process.exit(1);
}
let failed = 0;
for (const f of files) {
  const client = f.match(/\.to-(chat|responses|messages)\.sse$/)[1];
  body = readFileSync(f);
  const wantError = isError(client, body.toString('utf8'));
  try {
    const what = await judge(client);
    if (wantError) {
      failed++;
      console.log(`FAIL ${f}: the stream ends in an error, the SDK accepted it (${what})`);
    }
  } catch (e) {
    const apiError = e instanceof OpenAI.APIError || e instanceof Anthropic.APIError;
    if (!wantError || !apiError) {
      failed++;
      console.log(`FAIL ${f}: ${e?.constructor?.name}: ${e?.message}`);
    }
  }
}
server.close();
console.log(`${files.length - failed} of ${files.length} client transcripts accepted by the openai and @anthropic-ai/sdk stream helpers`);
process.exit(failed ? 1 : 0);
