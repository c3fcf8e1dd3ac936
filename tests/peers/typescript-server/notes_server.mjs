// A notes server on the official TypeScript MCP server SDK v2 (@modelcontextprotocol/server 2.4.0, pinned in
// package-lock.json) with an MRTR notes_delete tool, for fleets: every process reads and deletes notes in one
// SQLite file (Node 22's node:sqlite), so mcpsim can run several of them as a target (targets/sdk/typescript-*.toml,
// docs/targets.md "Planted mistakes").
//
//     node notes_server.mjs seed DB      # create DB with the three TPS notes and an empty ledger (idempotent)
//     node notes_server.mjs stdio DB     # serve over stdio (serveStdio, modern era only)
//
// The SDK applies no integrity protection to requestState by default; this server seals it with the SDK's own
// HMAC helper, createRequestStateCodec({ key: NOTES_STATE_KEY, bind }), dropped into
// ServerOptions.requestState.verify, and binds it to the credential the process was started with
// (NOTES_PRINCIPAL). The SDK does not make a state single-use: with NOTES_BUG unset this server does, with a
// nonce claimed in a ledger row in the same SQLite transaction as the delete (a decline claims it; a cancel or
// an invalid answer claims nothing). NOTES_BUG plants one mistake; the switches are those of
// tests/peers/nosdk/notes_server.py, where each is described. NOTES_AUDIT=random puts a fresh random `audit` id
// in every tools/call result's structured content; NOTES_EFFECT_MS makes the delete's effect take that long.
//
// The key, in the SDK's own terms: the codec takes exactly one `key` (>= 32 bytes, else a RangeError; no key
// list, no fallback keys, no key id in the wire value), so NOTES_STATE_KEY is that one key and rotating it means
// switching it (targets/matrix/typescript.toml). The SDK has no per-process default key either (with no
// `verify` hook it passes the wire string through unverified), so NOTES_STATE_KEY=ephemeral is this server's
// own: 32 bytes drawn from crypto.randomBytes at start, a key no other process holds.
import { createHash, randomBytes } from 'node:crypto';
import { DatabaseSync } from 'node:sqlite';
import { createRequestStateCodec, inputRequired, inputResponse, McpServer, ProtocolError } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import * as z from 'zod';

const WORKSPACE = 'file:///work/notes';
const SEED = [
    ['note-3', WORKSPACE, 'TPS report 2023'],
    ['note-7', WORKSPACE, 'TPS report 2024'],
    ['note-14', WORKSPACE, 'TPS report 2025']
];
const BUGS = ['burn-on-cancel', 'burn-on-invalid', 'bind-client-info', 'error-on-retry', 'check-then-act', 'no-single-use'];
const INPUT_KEY = 'delete_choice';
const CLIENT_INFO = 'io.modelcontextprotocol/clientInfo';

function connect(path) {
    const db = new DatabaseSync(path, { timeout: 10000 });
    db.exec('PRAGMA journal_mode=WAL');
    db.exec('CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, workspace TEXT NOT NULL, title TEXT NOT NULL)');
    db.exec('CREATE TABLE IF NOT EXISTS ledger (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL)');
    return db;
}

function fail(message) {
    process.stderr.write(`${message}\n`);
    process.exit(2);
}

function sleep(ms) {
    if (ms > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function serve(path) {
    const given = process.env.NOTES_STATE_KEY ?? '';
    const key = given === 'ephemeral' ? randomBytes(32) : given;
    if (Buffer.byteLength(key) < 32) {
        fail('NOTES_STATE_KEY must be set to a shared key of at least 32 bytes (or to ephemeral: a random key of this process)');
    }
    const principal = process.env.NOTES_PRINCIPAL ?? '';
    if (!principal) fail('NOTES_PRINCIPAL must name who this process acts for');
    const bug = process.env.NOTES_BUG || undefined;
    if (bug !== undefined && !BUGS.includes(bug)) fail(`unknown NOTES_BUG ${bug}; one of ${BUGS.join(', ')}`);
    const audit = process.env.NOTES_AUDIT === 'random';
    const effectMs = Number(process.env.NOTES_EFFECT_MS ?? '0');
    const db = connect(path);

    const clientInfoName = ctx => ctx.mcpReq.envelope?.[CLIENT_INFO]?.name ?? '';
    const codec = createRequestStateCodec({
        key,
        ttlSeconds: 300,
        bind: ctx => `${ctx.mcpReq.method}\0${bug === 'bind-client-info' ? clientInfoName(ctx) : principal}`
    });

    const result = (text, structured = {}, isError = false) => {
        const structuredContent = audit ? { ...structured, audit: randomBytes(8).toString('hex') } : structured;
        return {
            content: [{ type: 'text', text }],
            ...(Object.keys(structuredContent).length ? { structuredContent } : {}),
            ...(isError ? { isError: true } : {})
        };
    };
    const claim = (nonce, outcome) => {
        try {
            db.prepare('INSERT INTO ledger (nonce, outcome) VALUES (?, ?)').run(nonce, outcome);
            return true;
        } catch (e) {
            if (String(e.message).includes('UNIQUE')) return false;
            throw e;
        }
    };
    const used = () => result('this confirmation was already used', { deleted: false, outcome: 'used' }, true);
    const digest = value => createHash('sha256').update(JSON.stringify(value)).digest('hex');

    const remove = (nonce, noteId, claimed) => {
        const deleted = result(`deleted ${noteId}`, { deleted: true, noteId, outcome: 'deleted' });
        const gone = result(`${noteId} is already gone`, { deleted: false, outcome: 'gone' }, true);
        if (bug === 'no-single-use') {
            const removed = db.prepare('DELETE FROM notes WHERE id = ?').run(noteId).changes;
            sleep(effectMs);
            return removed === 1 ? deleted : gone;
        }
        if (bug === 'check-then-act') {
            if (db.prepare('SELECT 1 FROM ledger WHERE nonce = ?').get(nonce)) return used();
            // The ledger is trusted to make the state single-use, so the row count is not looked at.
            db.prepare('DELETE FROM notes WHERE id = ?').run(noteId);
            sleep(effectMs);
            db.prepare("INSERT OR IGNORE INTO ledger (nonce, outcome) VALUES (?, 'accepted')").run(nonce);
            return deleted;
        }
        // Claim and delete in one transaction: a claim already there means the state was used.
        db.exec('BEGIN IMMEDIATE');
        try {
            if (!claimed) {
                if (db.prepare('SELECT 1 FROM ledger WHERE nonce = ?').get(nonce)) {
                    db.exec('ROLLBACK');
                    return used();
                }
                db.prepare("INSERT INTO ledger (nonce, outcome) VALUES (?, 'accepted')").run(nonce);
            }
            const removed = db.prepare('DELETE FROM notes WHERE id = ?').run(noteId).changes;
            sleep(effectMs);
            if (removed !== 1) {
                db.exec('ROLLBACK');
                return gone;
            }
            db.exec('COMMIT');
        } catch (e) {
            if (db.isTransaction) db.exec('ROLLBACK');
            throw e;
        }
        if (bug === 'error-on-retry') return result(`${noteId} not found`, { deleted: false, outcome: 'error' }, true);
        return deleted;
    };

    const factory = () => {
        const server = new McpServer(
            { name: 'notes-fleet-ts', version: '0.1.0' },
            { capabilities: { tools: {} }, requestState: { verify: codec.verify } }
        );
        server.registerTool(
            'notes_list',
            { description: 'Every note (id and title).', inputSchema: z.object({}), annotations: { readOnlyHint: true } },
            async () => {
                const notes = db.prepare('SELECT id, title FROM notes ORDER BY id').all().map(r => ({ id: r.id, title: r.title }));
                return result(JSON.stringify(notes), { notes });
            }
        );
        server.registerTool(
            'notes_delete',
            {
                description: 'Delete a note by title inside a workspace; asks the user to pick and confirm.',
                inputSchema: z.object({ workspaceUri: z.string(), title: z.string() }),
                annotations: { destructiveHint: true, readOnlyHint: false }
            },
            async (args, ctx) => {
                const state = ctx.mcpReq.requestState();
                if (state === undefined) {
                    // No capability check here: the SDK refuses an elicitation the request's capabilities do not
                    // declare (-32021) when the handler returns it; an error thrown in a tool becomes an isError result.
                    const rows = db
                        .prepare('SELECT id FROM notes WHERE workspace = ? AND instr(lower(title), lower(?)) > 0 ORDER BY id')
                        .all(args.workspaceUri, args.title);
                    const candidates = rows.map(r => r.id);
                    if (candidates.length === 0) return result('no matching note', {}, true);
                    const requestedSchema = {
                        type: 'object',
                        properties: {
                            note_id: { type: 'string', enum: candidates, title: 'Note' },
                            confirm: { type: 'boolean', title: 'Really delete?' }
                        },
                        required: ['note_id', 'confirm']
                    };
                    return inputRequired({
                        inputRequests: {
                            [INPUT_KEY]: inputRequired.elicit({ message: `Which '${args.title}' should be deleted?`, requestedSchema })
                        },
                        requestState: await codec.mint({ nonce: randomBytes(16).toString('hex'), candidates, args: digest(args) }, ctx)
                    });
                }
                if (state.args !== digest(args)) {
                    throw new ProtocolError(-32602, 'Invalid or expired requestState', { reason: 'invalid_request_state' });
                }
                const answer = inputResponse(ctx.mcpReq.inputResponses, INPUT_KEY);
                if (answer.kind !== 'elicit') return result(`missing ${INPUT_KEY}`, {}, true);
                if (answer.action === 'decline') {
                    if (bug !== 'no-single-use' && !claim(state.nonce, 'declined')) return used();
                    return result('not deleted (decline)', { deleted: false, outcome: 'decline' });
                }
                if (answer.action === 'cancel') {
                    if (bug === 'burn-on-cancel' && !claim(state.nonce, 'cancelled')) return used();
                    return result('not deleted (cancel)', { deleted: false, outcome: 'cancel' });
                }
                const claimed = bug === 'burn-on-invalid';
                if (claimed && !claim(state.nonce, 'answered')) return used();
                const content = answer.content ?? {};
                const noteId = content.note_id;
                if (content.confirm !== true || typeof noteId !== 'string' || !state.candidates.includes(noteId)) {
                    return result('invalid answer: note_id must be one of the candidates shown and confirm true', {}, true);
                }
                return remove(state.nonce, noteId, claimed);
            }
        );
        return server;
    };
    serveStdio(factory, { legacy: 'reject' });
}

const [command, path] = process.argv.slice(2);
if (command === 'seed' && path) {
    const db = connect(path);
    const insert = db.prepare('INSERT OR REPLACE INTO notes (id, workspace, title) VALUES (?, ?, ?)');
    for (const row of SEED) insert.run(...row);
} else if (command === 'stdio' && path) {
    serve(path);
} else {
    fail('usage: notes_server.mjs seed DB | stdio DB');
}
