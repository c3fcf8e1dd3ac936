// The v1 TypeScript SDK (@modelcontextprotocol/sdk, pinned in package.json: a 2025-11-25 client that opens
// with initialize) completes mcpsim's notes_delete confirmation against `mcpsim serve --eras both`: the
// confirmation arrives as a server-to-client elicitation/create request inside the open tools/call, the
// SDK's handler answers it, the call completes, and the note is gone. Over HTTP the session is the server's
// Mcp-Session-Id; over stdio the process is the session.
//
//   MCPSIM_URL=http://127.0.0.1:PORT/mcp [MCPSIM_TOKEN=demo-alice] node legacy_notes_delete.mjs http
//   MCPSIM_BIN=target/debug/mcpsim node legacy_notes_delete.mjs stdio
//
// Exits 0 with one summary line, or 1 naming the step that went wrong.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';

const LEGACY_VERSION = '2025-11-25';
const WORKSPACE = 'file:///Users/alice/Documents/Notes';
const CHOSEN_NOTE = 'note-7';
/// Bound on each request: a server that stops answering fails the run instead of hanging CI.
const REQUEST_TIMEOUT_MS = 15_000;

const mode = process.argv[2];
let transport;
if (mode === 'http') {
  const url = process.env.MCPSIM_URL;
  if (!url) {
    console.error('set MCPSIM_URL, e.g. http://127.0.0.1:8080/mcp (mcpsim serve --http 127.0.0.1:8080 --eras both)');
    process.exit(2);
  }
  const token = process.env.MCPSIM_TOKEN ?? 'demo-alice';
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
} else if (mode === 'stdio') {
  const bin = process.env.MCPSIM_BIN;
  if (!bin) {
    console.error('set MCPSIM_BIN to the mcpsim binary (it is started as `mcpsim serve --stdio --eras both`)');
    process.exit(2);
  }
  transport = new StdioClientTransport({ command: bin, args: ['serve', '--stdio', '--eras', 'both'], stderr: 'inherit' });
} else {
  console.error('usage: node legacy_notes_delete.mjs http|stdio');
  process.exit(2);
}

const elicitations = [];
// `{elicitation: {}}` is the 2025-11-25 way of declaring form elicitation.
const client = new Client({ name: 'mcpsim-peer-typescript-v1', version: '1.0.0' }, { capabilities: { elicitation: {} } });
// The "user": picks the candidate the server offers and confirms, as a person answering the form would.
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  elicitations.push(request.params);
  const candidates = request.params.requestedSchema?.properties?.note_id?.enum ?? [];
  assert.ok(candidates.includes(CHOSEN_NOTE), `the form offers ${CHOSEN_NOTE}: ${JSON.stringify(candidates)}`);
  return { action: 'accept', content: { note_id: CHOSEN_NOTE, confirm: true } };
});

async function step(name, action) {
  try {
    return await action();
  } catch (error) {
    console.error(`typescript v1 peer (${mode}): ${name} failed: ${error?.stack ?? error}`);
    process.exit(1);
  }
}

const options = { timeout: REQUEST_TIMEOUT_MS };
await step(`connect (initialize at ${LEGACY_VERSION})`, async () => {
  await client.connect(transport, options);
  assert.equal(client.getServerVersion()?.name, 'mcpsim-notes');
  if (mode === 'http') assert.ok(transport.sessionId, 'the server minted an Mcp-Session-Id');
});
await step('ping', () => client.ping(options));
await step('tools/list', async () => {
  const { tools } = await client.listTools(undefined, options);
  assert.ok(tools.some((tool) => tool.name === 'notes_delete'), `notes_delete is listed: ${tools.map((t) => t.name)}`);
});
const listed = async () => (await client.listResources(undefined, options)).resources.map((resource) => resource.name);
await step('resources/list before', async () => assert.ok((await listed()).includes(CHOSEN_NOTE), `${CHOSEN_NOTE} exists before`));
const result = await step('tools/call notes_delete (elicitation/create inside the call)', () =>
  client.callTool({ name: 'notes_delete', arguments: { workspaceUri: WORKSPACE, title: 'TPS report' } }, undefined, options),
);
await step('the outcome', async () => {
  assert.equal(elicitations.length, 1, 'exactly one confirmation was asked');
  assert.equal(result.isError, false, JSON.stringify(result));
  assert.deepEqual(result.structuredContent, { deleted: true, noteId: CHOSEN_NOTE, outcome: 'deleted' });
  assert.equal(result.resultType, undefined, 'a legacy result carries no 2026-07-28 resultType');
});
await step('resources/list after', async () => assert.ok(!(await listed()).includes(CHOSEN_NOTE), `${CHOSEN_NOTE} is gone`));
await step('close', async () => {
  if (mode === 'http') await transport.terminateSession();
  await client.close();
});
console.log(`typescript v1 peer (${mode}): initialize ${LEGACY_VERSION}, elicitation/create answered inside the call, ${CHOSEN_NOTE} deleted`);
