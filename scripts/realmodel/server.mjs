// A small OpenAI-compatible chat server over node-llama-cpp, for the real-model tests and bench.
//
// node-llama-cpp ships llama.cpp prebuilt on npm but no HTTP server, so this is the thin layer a
// client of ours needs, and nothing more: POST /v1/chat/completions (response_format text,
// json_object and json_schema, enforced by a grammar as llama.cpp's own server does; usage
// tokens), GET /v1/models, GET /health, and GET /stats: the requests it received and the tokens it
// reported, so a test can hold the client's ledger against the server's own count.
//
//   node server.mjs --prefix NPM_PREFIX --model FILE.gguf [--port 0] [--sequences 2]
//                   [--context 8192] [--max-tokens 512] [--threads N]
//
// --max-tokens caps every reply (a request may ask for fewer, never more).
//
// NPM_PREFIX is where node-llama-cpp is installed (scripts/install-realmodel.sh: .tools/llama).
//
// It listens on 127.0.0.1 only and prints one line `listening http://127.0.0.1:PORT` on stdout
// when the model is loaded and the socket is bound (port 0: the system picks a free one).
// SIGTERM or SIGINT closes it.

import http from "node:http";
import process from "node:process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: opts } = parseArgs({
  options: {
    prefix: { type: "string" },
    model: { type: "string" },
    port: { type: "string", default: "0" },
    sequences: { type: "string", default: "2" },
    context: { type: "string", default: "8192" },
    "max-tokens": { type: "string", default: "512" },
    threads: { type: "string", default: "0" },
  },
});
if (!opts.model || !opts.prefix) {
  process.stderr.write("server.mjs: --prefix NPM_PREFIX and --model FILE.gguf are required\n");
  process.exit(2);
}
const entry = createRequire(join(opts.prefix, "package.json")).resolve("node-llama-cpp");
const { getLlama, LlamaChat } = await import(pathToFileURL(entry).href);

const SEQUENCES = Math.max(1, Number(opts.sequences));
const CONTEXT = Number(opts.context);
const MAX_TOKENS = Number(opts["max-tokens"]);
const MAX_BODY = 8 * 1024 * 1024;

const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: opts.model });
const context = await model.createContext({
  contextSize: CONTEXT,
  sequences: SEQUENCES,
  ...(Number(opts.threads) > 0 ? { threads: Number(opts.threads) } : {}),
});
const modelId = opts.model.split("/").pop().replace(/\.gguf$/, "");

// What the server received and reported: the other side of the client's ledger.
const stats = {
  requests: 0, // every POST to /v1/chat/completions, answered or not
  answered: 0,
  rejected: 0, // 4xx: bad body, bad schema, prompt over the context
  failed: 0, // 5xx
  prompt_tokens: 0,
  completion_tokens: 0,
  by_format: { text: 0, json_object: 0, json_schema: 0 },
};

// Free sequences; a request waits for one (a FIFO of resolvers).
const free = Array.from({ length: SEQUENCES }, () => context.getSequence());
const waiting = [];
function acquire() {
  if (free.length > 0) return Promise.resolve(free.pop());
  return new Promise((resolve) => waiting.push(resolve));
}
function release(sequence) {
  const next = waiting.shift();
  if (next) next(sequence);
  else free.push(sequence);
}

class RequestError extends Error {
  constructor(status, message, code = "invalid_request_error") {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && part.type === "text" ? String(part.text ?? "") : ""))
      .join("");
  }
  if (content == null) return "";
  throw new RequestError(400, "message content must be a string or a list of parts");
}

function chatHistory(messages) {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new RequestError(400, "messages must be a non-empty list");
  }
  const history = messages.map((message) => {
    const text = textOf(message?.content);
    switch (message?.role) {
      case "system":
      case "developer":
        return { type: "system", text };
      case "user":
        return { type: "user", text };
      case "assistant":
        return { type: "model", response: [text] };
      default:
        throw new RequestError(400, `unsupported message role: ${message?.role}`);
    }
  });
  // The model answers the last user message: an empty model turn to fill.
  history.push({ type: "model", response: [] });
  return history;
}

const schemaGrammars = new Map();
async function grammarFor(format) {
  const type = format?.type ?? "text";
  if (type === "text") return { kind: "text", grammar: undefined };
  if (type === "json_object") return { kind: "json_object", grammar: await llama.getGrammarFor("json") };
  if (type === "json_schema") {
    const schema = format.json_schema?.schema;
    if (schema == null || typeof schema !== "object") {
      throw new RequestError(400, "response_format.json_schema.schema must be an object");
    }
    const key = JSON.stringify(schema);
    if (!schemaGrammars.has(key)) {
      try {
        schemaGrammars.set(key, await llama.createGrammarForJsonSchema(schema));
      } catch (error) {
        throw new RequestError(400, `unsupported JSON schema: ${error.message}`);
      }
    }
    return { kind: "json_schema", grammar: schemaGrammars.get(key) };
  }
  throw new RequestError(400, `unsupported response_format type: ${type}`);
}

async function complete(body, signal) {
  const history = chatHistory(body.messages);
  const { kind, grammar } = await grammarFor(body.response_format);
  stats.by_format[kind] += 1;
  // The server's --max-tokens is a ceiling, as llama.cpp's own server caps a request's
  // n_predict: a small model asked for JSON can ramble to whatever budget it is given.
  const asked = Number(body.max_completion_tokens ?? body.max_tokens ?? MAX_TOKENS);
  const maxTokens = Math.min(asked > 0 ? asked : MAX_TOKENS, MAX_TOKENS);
  const sequence = await acquire();
  const chat = new LlamaChat({ contextSequence: sequence, autoDisposeSequence: false });
  try {
    const promptTokens = chat.chatWrapper
      .generateContextState({ chatHistory: history })
      .contextText.tokenize(model.tokenizer).length;
    if (promptTokens + 1 >= CONTEXT) {
      throw new RequestError(
        400,
        `the prompt has ${promptTokens} tokens; the context holds ${CONTEXT}`,
        "context_length_exceeded",
      );
    }
    let completionTokens = 0;
    const result = await chat.generateResponse(history, {
      grammar,
      maxTokens: Math.max(1, Math.min(maxTokens, CONTEXT - promptTokens - 1)),
      temperature: Number(body.temperature ?? 0.8),
      topP: body.top_p == null ? undefined : Number(body.top_p),
      seed: body.seed == null ? undefined : Number(body.seed),
      signal,
      stopOnAbortSignal: true,
      onToken: (tokens) => {
        completionTokens += tokens.length;
      },
    });
    const stop = result.metadata.stopReason === "maxTokens" ? "length" : "stop";
    return { text: result.response, finish: stop, promptTokens, completionTokens };
  } finally {
    chat.dispose({ disposeSequence: false });
    await sequence.clearHistory();
    release(sequence);
  }
}

function send(res, status, payload) {
  const data = JSON.stringify(payload);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        reject(new RequestError(413, "request body too large"));
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

let counter = 0;
async function chatCompletions(req, res) {
  stats.requests += 1;
  const aborter = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) aborter.abort(new Error("client went away"));
  });
  try {
    let body;
    try {
      body = JSON.parse(await readBody(req));
    } catch (error) {
      throw error instanceof RequestError ? error : new RequestError(400, "body is not JSON");
    }
    if (body.stream) throw new RequestError(400, "streaming is not supported by this server");
    const out = await complete(body, aborter.signal);
    stats.answered += 1;
    stats.prompt_tokens += out.promptTokens;
    stats.completion_tokens += out.completionTokens;
    counter += 1;
    send(res, 200, {
      id: `chatcmpl-${process.pid}-${counter}`,
      object: "chat.completion",
      created: Math.floor(Date.now() / 1000),
      model: body.model ?? modelId,
      choices: [
        { index: 0, message: { role: "assistant", content: out.text }, finish_reason: out.finish },
      ],
      usage: {
        prompt_tokens: out.promptTokens,
        completion_tokens: out.completionTokens,
        total_tokens: out.promptTokens + out.completionTokens,
      },
    });
  } catch (error) {
    const status = error instanceof RequestError ? error.status : 500;
    if (status >= 500) stats.failed += 1;
    else stats.rejected += 1;
    const code = error instanceof RequestError ? error.code : "server_error";
    if (!res.headersSent && !res.destroyed) {
      send(res, status, { error: { message: String(error.message ?? error), type: code, code } });
    }
  }
}

const server = http.createServer((req, res) => {
  const path = (req.url ?? "/").split("?")[0];
  if (req.method === "GET" && path === "/health") return send(res, 200, { status: "ok" });
  if (req.method === "GET" && path === "/stats") return send(res, 200, stats);
  if (req.method === "GET" && path === "/v1/models") {
    return send(res, 200, { object: "list", data: [{ id: modelId, object: "model", owned_by: "local" }] });
  }
  if (req.method === "POST" && path === "/v1/chat/completions") return void chatCompletions(req, res);
  send(res, 404, { error: { message: `no route for ${req.method} ${path}`, type: "not_found" } });
});
server.keepAliveTimeout = 30_000;

// Nothing here is worth a graceful drain (no file is written): a signal ends the process at once,
// so a test's teardown never waits on a generation in flight.
function stop() {
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

server.listen(Number(opts.port), "127.0.0.1", () => {
  process.stdout.write(`listening http://127.0.0.1:${server.address().port}\n`);
});
