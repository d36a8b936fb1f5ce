// The official TypeScript MCP client, @modelcontextprotocol/client 2.4.0 (v2 of the TypeScript
// SDK, the package that replaces @modelcontextprotocol/sdk's client), against a Conveyor started
// with `conveyor up --fixtures`. Run by tests/tests/ts_client.rs, which installs the package and
// a Node 22 next to a copy of this file:
//
//     node client_v2.mjs http://127.0.0.1:PORT/mcp
//
// Plain ESM JavaScript, no build step. Prints one line per check ("PASS name: detail" or
// "FAIL name: why"), "INFO ..." lines for what was learnt about the client, and exits 1 if any
// check failed.
//
// What the client 2.4.0 negotiates and supports, as this script finds it against Conveyor:
//
// - Version: with `versionNegotiation: { mode: "auto" }` it probes with `server/discover` and
//   negotiates 2026-07-28 (era "modern"); it then sends the protocol version, client info and
//   client capabilities in every request's `_meta`. With the default (`mode: "legacy"`) it runs
//   the 2025 `initialize` handshake and negotiates 2025-11-25. Both connections are used below.
// - 2026-07-28: tools, prompts, resources, progress (`onprogress`, notifications on the call's
//   response stream) and multi-round-trip requests (MRTR): an `input_required` result is answered
//   automatically through the `elicitation/create` handler registered with setRequestHandler, and
//   the call retried with `inputResponses` and the echoed `requestState` inside one callTool().
// - 2026-07-28 Tasks extension (io.modelcontextprotocol/tasks): not supported. The client may
//   declare the extension in its capabilities, but a `tools/call` answered with
//   `resultType: "task"` is rejected by the client itself with SdkError UNSUPPORTED_RESULT_TYPE,
//   so the task id never reaches the caller; there is no tasks/get / tasks/update API. The
//   script checks exactly that refusal.
// - 2025-11-25: elicitation as a server-to-client JSON-RPC request on the call's SSE stream,
//   answered by the same handler.
// - 2025-11-25 experimental tasks: no SDK runtime either (its schemas say "2025-11-25 wire
//   vocabulary with no SDK runtime"), but the wire methods exist in the 2025 codec, so the
//   script drives them by hand through the client's generic `client.request()` with a
//   pass-through result schema: a task-augmented `tools/call`, `tasks/get` polling, then
//   `tasks/result`, on whose SSE stream Conveyor sends the task's `elicitation/create` request,
//   which the client's registered handler answers.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const url = process.argv[2];
if (!url) {
  console.error("usage: node client_v2.mjs <MCP URL>");
  process.exit(2);
}

const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
const REQUEST = { timeout: 30_000 };
// A Standard Schema that accepts any value: the result schema `client.request()` needs for
// methods the SDK has no result schema for (tasks/*, and a task-augmented tools/call).
const anyResult = { "~standard": { version: 1, vendor: "conveyor-test", validate: (value) => ({ value }) } };

let failures = 0;
function pass(name, detail) {
  console.log(`PASS ${name}: ${detail}`);
}
function fail(name, why) {
  failures += 1;
  console.log(`FAIL ${name}: ${why}`);
}
function info(text) {
  console.log(`INFO ${text}`);
}
function errorText(error) {
  const code = error?.code === undefined ? "" : ` [${error.code}]`;
  const data = error?.data === undefined ? "" : ` ${JSON.stringify(error.data)}`;
  return `${error?.constructor?.name ?? "Error"}${code}: ${error?.message ?? error}${data}`;
}
function expect(condition, what) {
  if (!condition) throw new Error(what);
}
async function check(name, body) {
  try {
    pass(name, await body());
  } catch (error) {
    fail(name, errorText(error));
  }
}
function textOf(result) {
  return (result?.content ?? []).find((c) => c.type === "text")?.text;
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The answers a person would type, by form field. Any other required field is declined.
const ANSWERS = { name: "TypeScript", username: "ts-client", email: "ts@example.com", confirm: true };

// Every elicitation the handler answered, in order, with the client it came to.
const elicitations = [];

function newClient(label, options) {
  const client = new Client({ name: `conveyor-ts-${label}`, version: "1.0.0" }, options);
  // Whatever the client finds wrong with the connection (and survives) is shown, not fatal.
  client.onerror = (error) => info(`${label} client onerror: ${errorText(error)}`);
  client.setRequestHandler("elicitation/create", async (request) => {
    const params = request.params ?? {};
    const properties = params.requestedSchema?.properties ?? {};
    const required = params.requestedSchema?.required ?? [];
    elicitations.push({
      client: label,
      message: params.message,
      fields: Object.keys(properties),
      relatedTask: params._meta?.["io.modelcontextprotocol/related-task"]?.taskId,
    });
    if (required.some((field) => !(field in ANSWERS))) return { action: "decline" };
    const content = {};
    for (const field of Object.keys(properties)) {
      if (field in ANSWERS) content[field] = ANSWERS[field];
    }
    return { action: "accept", content };
  });
  return client;
}

// ---------------------------------------------------------------------------------------------
// 2026-07-28

const modern = newClient("2026", {
  capabilities: { elicitation: { form: {} }, extensions: { [TASKS_EXTENSION]: {} } },
  versionNegotiation: { mode: "auto" },
});

let modernConnected = false;
await check("connect 2026-07-28", async () => {
  await modern.connect(new StreamableHTTPClientTransport(new URL(url)), REQUEST);
  modernConnected = true;
  const version = modern.getNegotiatedProtocolVersion();
  const era = modern.getProtocolEra();
  expect(version === "2026-07-28", `negotiated ${version}, expected 2026-07-28`);
  expect(era === "modern", `era ${era}, expected modern`);
  const extensions = modern.getServerCapabilities()?.extensions ?? {};
  expect(TASKS_EXTENSION in extensions, `the server declares no tasks extension: ${JSON.stringify(extensions)}`);
  info(`2026 connection: protocol ${version} (era ${era}, server/discover), server ${JSON.stringify(modern.getServerVersion())}`);
  return `protocol ${version}, era ${era}, server declares ${TASKS_EXTENSION}`;
});

if (modernConnected) {
  await check("tools/list", async () => {
    const { tools } = await modern.listTools(undefined, REQUEST);
    const names = tools.map((t) => t.name);
    for (const name of ["test_simple_text", "test_tool_with_progress", "test_input_required_result_elicitation", "confirm_delete"]) {
      expect(names.includes(name), `${name} is not listed: ${names.join(", ")}`);
    }
    const confirm = tools.find((t) => t.name === "confirm_delete");
    expect(confirm.inputSchema?.properties?.filename, `confirm_delete has no filename argument: ${JSON.stringify(confirm.inputSchema)}`);
    return `${tools.length} tools, including the four this script calls`;
  });

  await check("tools/call test_simple_text", async () => {
    const result = await modern.callTool({ name: "test_simple_text", arguments: {} }, REQUEST);
    const text = textOf(result);
    expect(text === "This is a simple text response for testing.", `text ${JSON.stringify(text)}`);
    expect(result.isError !== true, "isError is true");
    return JSON.stringify(text);
  });

  await check("tools/call test_tool_with_progress", async () => {
    const progress = [];
    const result = await modern.callTool(
      { name: "test_tool_with_progress", arguments: {} },
      { ...REQUEST, onprogress: (p) => progress.push(p) },
    );
    const text = textOf(result);
    expect(text === "Progress test completed", `text ${JSON.stringify(text)}`);
    expect(progress.length >= 3, `${progress.length} progress notifications: ${JSON.stringify(progress)}`);
    const values = progress.map((p) => p.progress);
    expect(values.every((v, i) => i === 0 || values[i - 1] <= v), `progress went back: ${values}`);
    expect(values.at(-1) === 100 && progress.every((p) => p.total === 100), `last ${JSON.stringify(progress.at(-1))}`);
    return `${JSON.stringify(text)} after progress ${values.join(", ")} of 100`;
  });

  await check("elicitation by MRTR (test_input_required_result_elicitation)", async () => {
    const before = elicitations.length;
    const result = await modern.callTool({ name: "test_input_required_result_elicitation", arguments: {} }, REQUEST);
    const text = textOf(result);
    const asked = elicitations.slice(before);
    expect(asked.length === 1, `the handler answered ${asked.length} elicitations: ${JSON.stringify(asked)}`);
    expect(asked[0].message === "What is your name?", `asked ${JSON.stringify(asked[0].message)}`);
    expect(asked[0].fields.join() === "name", `fields ${asked[0].fields}`);
    expect(text === `Hello, ${ANSWERS.name}!`, `text ${JSON.stringify(text)}`);
    return `handler asked ${JSON.stringify(asked[0].message)}; callTool retried by itself and got ${JSON.stringify(text)}`;
  });

  await check("prompts/list adr_nygard", async () => {
    const { prompts } = await modern.listPrompts(undefined, REQUEST);
    const prompt = prompts.find((p) => p.name === "adr_nygard");
    expect(prompt, `adr_nygard is not listed: ${prompts.map((p) => p.name).join(", ")}`);
    const title = prompt.arguments?.find((a) => a.name === "title");
    expect(title?.required === true, `title is not a required argument: ${JSON.stringify(prompt.arguments)}`);
    return `${JSON.stringify(prompt.title)} with arguments ${prompt.arguments.map((a) => a.name).join(", ")}`;
  });

  await check("prompts/get adr_nygard", async () => {
    const title = "Use Redis streams for queues";
    const result = await modern.getPrompt({ name: "adr_nygard", arguments: { title } }, REQUEST);
    const messages = result.messages ?? [];
    const template = messages.find((m) => m.content?.type === "resource")?.content.resource;
    const ask = messages.find((m) => m.content?.type === "text")?.content.text ?? "";
    expect(template?.uri === "conveyor://adr-templates/nygard", `no embedded template: ${JSON.stringify(messages).slice(0, 300)}`);
    expect(template.text.includes("## Decision"), "the template has no Decision section");
    expect(ask.includes(`"${title}"`), `the request does not name the title: ${JSON.stringify(ask)}`);
    return `${messages.length} messages: the template and a request naming "${title}"`;
  });

  await check("resources/read conveyor://adr-templates/nygard", async () => {
    const result = await modern.readResource({ uri: "conveyor://adr-templates/nygard" }, REQUEST);
    const contents = result.contents ?? [];
    expect(contents.length === 1, `${contents.length} contents`);
    const [content] = contents;
    expect(content.uri === "conveyor://adr-templates/nygard", `uri ${content.uri}`);
    expect(content.mimeType === "text/markdown", `mimeType ${content.mimeType}`);
    for (const section of ["## Status", "## Context", "## Decision", "## Consequences"]) {
      expect(content.text?.includes(section), `no ${section} in ${JSON.stringify(content.text).slice(0, 200)}`);
    }
    return `${content.mimeType}, ${content.text.length} characters, every Nygard section`;
  });

  // The Tasks extension: the client declared it, so Conveyor answers confirm_delete (a tool that
  // runs only as a task) with `resultType: "task"`, which this client version cannot take.
  await check("tasks extension (confirm_delete on 2026-07-28) unsupported by the client", async () => {
    try {
      const result = await modern.callTool({ name: "confirm_delete", arguments: { filename: "draft.md" } }, REQUEST);
      throw new Error(`the client returned a result, so it handles tasks now: ${JSON.stringify(result)}`);
    } catch (error) {
      if (error?.code !== "UNSUPPORTED_RESULT_TYPE" || error?.data?.resultType !== "task") throw error;
      info(`2026 Tasks extension: the client refuses the task reply: ${errorText(error)}`);
      return "the client rejects resultType \"task\" with SdkError UNSUPPORTED_RESULT_TYPE (no Tasks-extension runtime)";
    }
  });

  await modern.close();
}

// ---------------------------------------------------------------------------------------------
// 2025-11-25

const legacy = newClient("2025", {
  capabilities: { elicitation: { form: {} }, tasks: { requests: { elicitation: { create: {} } } } },
});

let legacyConnected = false;
await check("connect 2025-11-25", async () => {
  await legacy.connect(new StreamableHTTPClientTransport(new URL(url)), REQUEST);
  legacyConnected = true;
  const version = legacy.getNegotiatedProtocolVersion();
  const era = legacy.getProtocolEra();
  expect(version === "2025-11-25", `negotiated ${version}, expected 2025-11-25`);
  const tasks = legacy.getServerCapabilities()?.tasks;
  expect(tasks?.requests?.tools?.call, `the server declares no task-augmented tools/call: ${JSON.stringify(tasks)}`);
  info(`2025 connection: protocol ${version} (era ${era}, initialize)`);
  return `protocol ${version}, era ${era}, server declares tasks.requests.tools.call`;
});

if (legacyConnected) {
  await check("elicitation by SSE request (test_elicitation)", async () => {
    const before = elicitations.length;
    const message = "Who is calling?";
    const result = await legacy.callTool({ name: "test_elicitation", arguments: { message } }, REQUEST);
    const text = textOf(result) ?? "";
    const asked = elicitations.slice(before);
    expect(asked.length === 1, `the handler answered ${asked.length} elicitations: ${JSON.stringify(asked)}`);
    expect(asked[0].message === message, `asked ${JSON.stringify(asked[0].message)}`);
    expect(text.startsWith("User response: action=accept"), `text ${JSON.stringify(text)}`);
    expect(text.includes(`"username":"${ANSWERS.username}"`) && text.includes(`"email":"${ANSWERS.email}"`), `text ${JSON.stringify(text)}`);
    return `handler answered ${JSON.stringify(message)}; ${JSON.stringify(text)}`;
  });

  // Driven by hand (see the top of the file): the client has no task API, only the wire methods.
  await check("experimental task (confirm_delete on 2025-11-25) answered on tasks/result", async () => {
    const filename = "report.txt";
    const created = await legacy.request(
      { method: "tools/call", params: { name: "confirm_delete", arguments: { filename }, task: { ttl: 60_000 } } },
      anyResult,
      REQUEST,
    );
    const taskId = created?.task?.taskId;
    expect(typeof taskId === "string" && taskId.length > 0, `no task: ${JSON.stringify(created)}`);
    let status = created.task.status;
    const deadline = Date.now() + 20_000;
    while (status === "working") {
      expect(Date.now() < deadline, `task ${taskId} still working after 20 s`);
      await sleep(Math.min(created.task.pollInterval ?? 100, 200));
      status = (await legacy.request({ method: "tasks/get", params: { taskId } }, anyResult, REQUEST)).status;
    }
    expect(status === "input_required", `task ${taskId} is ${status}, expected input_required`);
    const before = elicitations.length;
    const result = await legacy.request({ method: "tasks/result", params: { taskId } }, anyResult, REQUEST);
    const asked = elicitations.slice(before);
    expect(asked.length === 1, `the handler answered ${asked.length} elicitations: ${JSON.stringify(asked)}`);
    expect(asked[0].message === `Delete ${filename}?`, `asked ${JSON.stringify(asked[0].message)}`);
    expect(asked[0].relatedTask === taskId, `the request names task ${asked[0].relatedTask}, not ${taskId}`);
    const text = textOf(result);
    expect(text === `Deleted ${filename}`, `text ${JSON.stringify(text)}`);
    const done = await legacy.request({ method: "tasks/get", params: { taskId } }, anyResult, REQUEST);
    expect(done.status === "completed", `task ends ${done.status}`);
    return `task ${taskId}: input_required, handler answered ${JSON.stringify(asked[0].message)}, ${JSON.stringify(text)}, completed`;
  });

  await legacy.close();
}

console.log(failures === 0 ? "ALL CHECKS PASSED" : `${failures} CHECK(S) FAILED`);
process.exit(failures === 0 ? 0 : 1);
