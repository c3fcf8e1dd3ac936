// The course's reference solution in TypeScript, on Node 22 alone (no npm package): the same stateless MCP
// 2026-07-28 server as course/solutions/python/server.py, for readers of that language. Node 22 runs this
// file directly (--experimental-strip-types); the shared store is SQLite through node:sqlite.
//
//   node --experimental-strip-types --experimental-sqlite server.ts seed DB    # three notes, once
//   node --experimental-strip-types --experimental-sqlite server.ts stdio DB   # serve over stdin/stdout
//
// Environment: COURSE_PRINCIPAL (who this process acts for), COURSE_KEYS ("kid=secret,…": the first signs,
// every one verifies), COURSE_EPHEMERAL_KEY=1 (a key of its own, drawn at start). The messages are in
// docs/wire.md. The four ideas, each marked LESSON below:
//   1. Nothing about a confirmation stays in this process: round 1 seals what round 2 needs into requestState.
//   2. Every instance holds the same key ring and the state names its key, so keys can rotate.
//   3. Single use lives in the SHARED store: the nonce is claimed in the same transaction as the delete.
//   4. Only a decision consumes: a decline claims the nonce; a cancel and an invalid answer claim nothing.
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createInterface } from "node:readline";
import { DatabaseSync } from "node:sqlite";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

const VERSION = "2026-07-28";
const SERVER_INFO = { name: "course-typescript", version: "1.0.0" };
const WORKSPACE = "file:///notes";
const NOTES: [string, string][] = [["note-3", "TPS report 2023"], ["note-7", "TPS report 2024"], ["note-14", "TPS report 2025"]];
const INPUT_KEY = "delete_choice";
const TTL_SECONDS = 300;
const TOOLS = [{
  name: "notes_delete",
  description: "Delete a note whose title contains `title`; asks which one, and to confirm.",
  inputSchema: { type: "object", required: ["title"], properties: { title: { type: "string" } } },
  annotations: { destructiveHint: true },
}];

/** A JSON-RPC error answer: a code from the spec, and for refusals `data.reason` (docs/wire.md). */
class RpcError extends Error {
  code: number;
  data: Obj;
  constructor(code: number, message: string, reason?: string, data: Obj = {}) {
    super(message);
    this.code = code;
    this.data = reason ? { ...data, reason } : data;
  }
}

const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const b64 = (data: Buffer | string) => Buffer.from(data).toString("base64url");
// Keys sorted, so a digest does not depend on the order a client wrote them in.
const canonical = (v: Json): string =>
  Array.isArray(v) ? `[${v.map(canonical).join(",")}]`
  : isObj(v) ? `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`
  : JSON.stringify(v);
const digest = (v: Json) => createHash("sha256").update(canonical(v)).digest("hex");

function result(text: string, structured: Obj): Obj {
  return { resultType: "complete", content: [{ type: "text", text }], structuredContent: structured,
    _meta: { "io.modelcontextprotocol/serverInfo": SERVER_INFO } };
}

function connect(path: string): DatabaseSync {
  // LESSON 3: the notes and the ledger of used states live in one SQLite file every instance opens.
  const db = new DatabaseSync(path);
  db.exec("PRAGMA busy_timeout = 5000");
  db.exec("PRAGMA journal_mode = WAL");
  db.exec("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, title TEXT NOT NULL)");
  db.exec("CREATE TABLE IF NOT EXISTS ledger (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL, note TEXT)");
  return db;
}

class Server {
  principal: string;
  keys: [string, Buffer][];
  db: DatabaseSync;

  constructor(path: string) {
    const principal = process.env.COURSE_PRINCIPAL;
    if (!principal) throw new Error("set COURSE_PRINCIPAL");
    this.principal = principal;
    // LESSON 2: one key ring for the whole fleet. The first key signs; every key verifies.
    if (process.env.COURSE_EPHEMERAL_KEY === "1") {
      this.keys = [[randomBytes(4).toString("hex"), randomBytes(32)]];
    } else {
      const ring = process.env.COURSE_KEYS;
      if (!ring) throw new Error("set COURSE_KEYS=kid=secret[,kid=secret…]");
      this.keys = ring.split(",").map((entry): [string, Buffer] => {
        const at = entry.indexOf("=");
        return [entry.slice(0, at), Buffer.from(entry.slice(at + 1))];
      });
    }
    this.db = connect(path);
  }

  // -- LESSON 1 and 2: the sealed state ---------------------------------------------------------------------
  seal(payload: Obj): string {
    const [kid, key] = this.keys[0];
    const signed = `${kid}.${b64(JSON.stringify(payload))}`;
    return `${signed}.${b64(createHmac("sha256", key).update(signed).digest())}`;
  }

  unseal(state: Json): Obj {
    const parts = typeof state === "string" ? state.split(".") : [];
    if (parts.length !== 3) throw new RpcError(-32602, "requestState is malformed", "state_malformed");
    const [kid, body, mac] = parts;
    const key = this.keys.find(([id]) => id === kid)?.[1];
    const expected = Buffer.from(b64(createHmac("sha256", key ?? Buffer.alloc(0)).update(`${kid}.${body}`).digest()));
    const given = Buffer.from(mac);
    if (!key || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw new RpcError(-32602, "requestState failed verification (altered, or sealed with a key not held)", "state_signature");
    }
    let payload: Json;
    try {
      payload = JSON.parse(Buffer.from(body, "base64url").toString());
    } catch {
      throw new RpcError(-32602, "requestState is malformed", "state_malformed");
    }
    if (!isObj(payload) || typeof payload.exp !== "number" || payload.exp < Date.now() / 1000) {
      throw new RpcError(-32602, "requestState expired; call notes_delete again", "state_expired");
    }
    return payload;
  }

  // -- JSON-RPC ---------------------------------------------------------------------------------------------
  handle(method: Json, params: Json): Obj {
    if (!isObj(params) || !isObj(params._meta)) throw new RpcError(-32602, "params._meta is required", "meta_invalid");
    const meta = params._meta;
    const version = meta["io.modelcontextprotocol/protocolVersion"];
    if (typeof version !== "string") {
      throw new RpcError(-32602, "_meta io.modelcontextprotocol/protocolVersion is required", "meta_invalid");
    }
    if (version !== VERSION) {
      throw new RpcError(-32022, "unsupported protocol version", undefined, { supported: [VERSION], requested: version });
    }
    switch (method) {
      case "server/discover":
        return { resultType: "complete", supportedVersions: [VERSION], capabilities: { tools: {} },
          _meta: { "io.modelcontextprotocol/serverInfo": SERVER_INFO } };
      case "tools/list":
        return { resultType: "complete", tools: TOOLS };
      case "resources/list": { // the effect probe: one resource per note left
        const rows = this.db.prepare("SELECT id, title FROM notes ORDER BY id").all() as { id: string; title: string }[];
        return { resultType: "complete", resources: rows.map((r) => ({ uri: `${WORKSPACE}/${r.id}`, name: r.title })) };
      }
      case "tools/call":
        if (params.name !== "notes_delete") throw new RpcError(-32602, `unknown tool ${JSON.stringify(params.name)}`, "unknown_tool");
        return this.notesDelete(params, meta);
      default:
        throw new RpcError(-32601, `method not found: ${method}`);
    }
  }

  notesDelete(params: Obj, meta: Obj): Obj {
    const args = isObj(params.arguments) ? params.arguments : {};
    if (typeof args.title !== "string") throw new RpcError(-32602, "arguments.title must be a string", "arguments_invalid");
    const state = params.requestState;
    const responses = params.inputResponses;
    if (state === undefined && responses === undefined) return this.ask(args, args.title, meta);
    if (state === undefined || !isObj(responses)) {
      throw new RpcError(-32602, "requestState and inputResponses come together", "continuation_unpaired");
    }
    const payload = this.unseal(state);
    // Bound to who asked (the credential, never _meta's clientInfo) and to what was asked.
    if (payload.p !== this.principal || payload.a !== digest(args)) {
      throw new RpcError(-32602, "requestState was issued for another principal or other arguments", "state_mismatch");
    }
    const answer = responses[INPUT_KEY];
    if (!isObj(answer) || !["accept", "decline", "cancel"].includes(answer.action as string)) {
      throw new RpcError(-32602, `inputResponses.${INPUT_KEY} is missing`, "response_invalid");
    }
    const nonce = payload.n as string;
    // LESSON 4: a decline is a decision (it spends the state); a cancel is not (nothing is claimed).
    if (answer.action === "decline") {
      const previous = this.previous(nonce);
      if (previous) throw this.consumed(previous);
      this.db.prepare("INSERT INTO ledger (nonce, outcome) VALUES (?, 'declined')").run(nonce);
      return result("not deleted: you declined", { deleted: false, outcome: "declined" });
    }
    if (answer.action === "cancel") return result("not deleted: cancelled", { deleted: false, outcome: "cancelled" });
    const content = answer.content;
    const shown = payload.c as string[];
    if (!isObj(content) || typeof content.note_id !== "string" || !shown.includes(content.note_id) || content.confirm !== true) {
      // Checked before anything is claimed: an invalid answer consumes nothing, the user can try again.
      throw new RpcError(-32602, "the answer must pick a note the form showed and confirm: true", "response_invalid");
    }
    return this.delete(nonce, content.note_id);
  }

  ask(args: Obj, title: string, meta: Obj): Obj {
    const caps = isObj(meta["io.modelcontextprotocol/clientCapabilities"]) ? meta["io.modelcontextprotocol/clientCapabilities"] : {};
    if (!isObj(caps.elicitation)) {
      throw new RpcError(-32021, "this tool asks the user: declare the elicitation capability", undefined,
        { requiredCapabilities: { elicitation: { form: {} } } });
    }
    const rows = this.db.prepare("SELECT id, title FROM notes WHERE instr(lower(title), lower(?)) > 0 ORDER BY id")
      .all(title) as { id: string; title: string }[];
    if (rows.length === 0) return { ...result("no note matches", { deleted: false, outcome: "no_match" }), isError: true };
    const candidates = rows.map((r) => r.id);
    // LESSON 1: everything round 2 needs, sealed; nothing kept here.
    const payload = { p: this.principal, a: digest(args), c: candidates, n: randomBytes(16).toString("hex"),
      exp: Math.floor(Date.now() / 1000) + TTL_SECONDS };
    const form = { mode: "form", message: "Which note should be deleted? " + rows.map((r) => `${r.id}: ${r.title}`).join(", "),
      requestedSchema: { type: "object", required: ["note_id", "confirm"], properties: {
        note_id: { type: "string", title: "Note", enum: candidates },
        confirm: { type: "boolean", title: "Really delete it?" } } } };
    return { resultType: "input_required", inputRequests: { [INPUT_KEY]: { method: "elicitation/create", params: form } },
      requestState: this.seal(payload) };
  }

  // -- LESSON 3: single use, in the shared store ------------------------------------------------------------
  previous(nonce: string): { outcome: string; note: string | null } | undefined {
    return this.db.prepare("SELECT outcome, note FROM ledger WHERE nonce = ?").get(nonce) as
      { outcome: string; note: string | null } | undefined;
  }

  consumed(previous: { outcome: string; note: string | null }): RpcError {
    const outcome: Obj = previous.note ? { outcome: previous.outcome, noteId: previous.note } : { outcome: previous.outcome };
    return new RpcError(-32602, "this confirmation was already used; call notes_delete again", "state_consumed",
      { previousOutcome: outcome });
  }

  delete(nonce: string, noteId: string): Obj {
    // One transaction: claim the nonce, delete the note. BEGIN IMMEDIATE takes the write lock first, so a second
    // accept of the same state, on any process, waits and then finds the row.
    try {
      this.db.exec("BEGIN IMMEDIATE");
    } catch {
      throw new RpcError(-32603, "the store is unavailable; nothing was deleted, please retry", "store_unavailable");
    }
    try {
      const previous = this.previous(nonce);
      if (previous) throw this.consumed(previous);
      if (this.db.prepare("DELETE FROM notes WHERE id = ?").run(noteId).changes !== 1) {
        throw new RpcError(-32602, `${noteId} no longer exists`, "note_gone"); // someone else's delete: nothing claimed
      }
      this.db.prepare("INSERT INTO ledger (nonce, outcome, note) VALUES (?, 'deleted', ?)").run(nonce, noteId);
      this.db.exec("COMMIT");
    } catch (error) {
      if (this.db.isTransaction) this.db.exec("ROLLBACK");
      if (error instanceof RpcError) throw error;
      throw new RpcError(-32603, "the store is unavailable; nothing was deleted, please retry", "store_unavailable");
    }
    return result(`deleted ${noteId}`, { deleted: true, noteId, outcome: "deleted" });
  }

  serve(): void {
    createInterface({ input: process.stdin, crlfDelay: Infinity }).on("line", (line) => {
      let message: Json;
      try {
        message = JSON.parse(line);
      } catch {
        return write({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "parse error" } });
      }
      if (!isObj(message) || !("id" in message)) return; // a notification: never answered, never acted on
      try {
        write({ jsonrpc: "2.0", id: message.id, result: this.handle(message.method, message.params ?? null) });
      } catch (error) {
        if (!(error instanceof RpcError)) throw error;
        const body: Obj = { code: error.code, message: error.message };
        if (Object.keys(error.data).length > 0) body.data = error.data;
        write({ jsonrpc: "2.0", id: message.id, error: body });
      }
    });
  }
}

function write(value: Obj): void {
  process.stdout.write(JSON.stringify(value) + "\n");
}

const [mode, path] = process.argv.slice(2);
if (mode === "seed" && path) {
  const db = connect(path);
  const insert = db.prepare("INSERT OR REPLACE INTO notes (id, title) VALUES (?, ?)");
  for (const [id, title] of NOTES) insert.run(id, title);
} else if (mode === "stdio" && path) {
  new Server(path).serve();
} else {
  console.error("usage: server.ts seed DB | stdio DB");
  process.exit(2);
}
