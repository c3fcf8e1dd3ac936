// The official TypeScript client SDK (@modelcontextprotocol/client, pinned in package.json) completes the
// notes_delete flow against `mcpsim serve --http`: discover, list, round 1, its elicitation handler accepting
// note-7, the SDK's own retry on a fresh id with the requestState echoed byte for byte, and the note is gone.
//
//   MCPSIM_URL=http://127.0.0.1:PORT/mcp [MCPSIM_TOKEN=demo-alice] node notes_delete.mjs
//
// Exits 0 with one summary line, or 1 naming the step that went wrong.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import assert from 'node:assert/strict';

const PROTOCOL_VERSION = '2026-07-28';
const WORKSPACE = 'file:///Users/alice/Documents/Notes';
const CHOSEN_NOTE = 'note-7';
/// Bound on the whole flow: a server that stops answering fails the run instead of hanging CI.
const REQUEST_TIMEOUT_MS = 15_000;

const url = process.env.MCPSIM_URL;
const token = process.env.MCPSIM_TOKEN ?? 'demo-alice';
if (!url) {
  console.error('set MCPSIM_URL to the server, e.g. http://127.0.0.1:8080/mcp (mcpsim serve --http 127.0.0.1:8080)');
  process.exit(2);
}

// Every tools/call the SDK sends, and what came back, as seen on the wire: the retry is the SDK's own doing,
// so it is checked from the bytes it sent, not from anything it reports.
const toolCalls = [];
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const body = typeof init?.body === 'string' ? JSON.parse(init.body) : null;
  if (body?.method === 'tools/call') {
    const answer = response.headers.get('content-type')?.startsWith('application/json') ? await response.clone().json() : null;
    toolCalls.push({ request: body, response: answer });
  }
  return response;
}

const elicitations = [];
const client = new Client(
  { name: 'mcpsim-peer-typescript', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: PROTOCOL_VERSION } } },
);
// The "user": accepts the candidate the server offers, as a person picking from the form would.
client.setRequestHandler('elicitation/create', async (request) => {
  elicitations.push(request.params);
  const candidates = request.params.requestedSchema?.properties?.note_id?.enum ?? [];
  assert.ok(candidates.includes(CHOSEN_NOTE), `the form offers ${CHOSEN_NOTE}: ${JSON.stringify(candidates)}`);
  return { action: 'accept', content: { note_id: CHOSEN_NOTE, confirm: true } };
});

async function step(name, action) {
  try {
    return await action();
  } catch (error) {
    console.error(`typescript peer: ${name} failed: ${error?.stack ?? error}`);
    process.exit(1);
  }
}

const options = { timeout: REQUEST_TIMEOUT_MS };
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
  fetch: recordingFetch,
});
await step('connect (server/discover, pinned to 2026-07-28)', async () => {
  await client.connect(transport, options);
  assert.equal(client.getNegotiatedProtocolVersion(), PROTOCOL_VERSION);
});
await step('tools/list', async () => {
  const { tools } = await client.listTools(undefined, options);
  assert.ok(tools.some((tool) => tool.name === 'notes_delete'), `notes_delete is listed: ${tools.map((t) => t.name)}`);
});
await step('resources/list before', async () => {
  const { resources } = await client.listResources(undefined, options);
  assert.ok(resources.some((resource) => resource.name === CHOSEN_NOTE), `${CHOSEN_NOTE} exists before`);
});
const deleteArguments = { workspaceUri: WORKSPACE, title: 'TPS report' };
const result = await step('tools/call notes_delete (input_required, elicitation, retry)', () =>
  client.callTool({ name: 'notes_delete', arguments: deleteArguments }, options),
);
await step('the outcome and the rounds on the wire', async () => {
  assert.deepEqual(result.structuredContent, { deleted: true, noteId: CHOSEN_NOTE, outcome: 'deleted' });
  assert.equal(elicitations.length, 1, 'the elicitation handler ran once');
  assert.equal(toolCalls.length, 2, 'round 1 and one retry');
  const [first, retry] = toolCalls;
  assert.equal(first.response?.result?.resultType, 'input_required');
  assert.notEqual(retry.request.id, first.request.id, 'the retry is a new request with a fresh id');
  assert.equal(retry.request.params.requestState, first.response.result.requestState, 'requestState echoed byte for byte');
  assert.deepEqual(retry.request.params.inputResponses, {
    delete_choice: { action: 'accept', content: { note_id: CHOSEN_NOTE, confirm: true } },
  });
  assert.deepEqual(retry.request.params.arguments, deleteArguments, 'the retry repeats the original arguments');
});
await step('resources/list after (cache refreshed)', async () => {
  const { resources } = await client.listResources(undefined, { ...options, cacheMode: 'refresh' });
  const names = resources.map((resource) => resource.name);
  assert.ok(!names.includes(CHOSEN_NOTE), `${CHOSEN_NOTE} is gone: ${names}`);
  assert.ok(names.includes('note-3') && names.includes('note-14'), `the other notes stay: ${names}`);
});
await client.close();
const [first, retry] = toolCalls;
console.log(
  `typescript @modelcontextprotocol/client 2.4.0: notes_delete complete in 2 rounds (ids ${first.request.id} -> ${retry.request.id}), ${CHOSEN_NOTE} deleted`,
);
