// The browser half of `tests/tests/web_ui.rs`: Debian's headless Chromium, driven by
// puppeteer-core, opens a real gateway's web view as a person would and reports what it saw.
// The Rust test starts Redis, Conveyor and the tasks, runs this script with one JSON argument,
// and checks the reported facts against Redis and MCP:
//
//   {"base": "http://127.0.0.1:port", "chromium": "/usr/bin/chromium", "artifacts": "<dir>",
//    "tokens": {"alice": "...", "ops": "..."}, "tasks": {"slow": id, "dag": id, "bobs": id}}
//
// Each step prints one JSON line ({"step": ...}); the last line is {"result": {...}}, or
// {"error": "..."} with a screenshot of the page as it was when the step failed.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

const config = JSON.parse(process.argv[2]);
const { base, tasks, tokens } = config;
const STEP_TIMEOUT = 20000;
const result = { screenshots: {} };
mkdirSync(config.artifacts, { recursive: true });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const say = (step, facts = {}) => console.log(JSON.stringify({ step, ...facts }));

const browser = await puppeteer.launch({
  executablePath: config.chromium,
  headless: true,
  // As root Chromium needs --no-sandbox; nothing here loads a page from outside the test.
  args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
let page = null;

async function shot(name) {
  const path = join(config.artifacts, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  result.screenshots[name] = path;
  say('screenshot', { name, path });
  return path;
}

async function openPage(context) {
  const p = await context.newPage();
  await p.setViewport({ width: 1440, height: 900 });
  p.on('pageerror', (error) => say('pageerror', { message: error.message }));
  p.on('console', (message) => {
    if (message.type() === 'error') say('console', { message: message.text() });
  });
  return p;
}

// An API answer's status as the page's own fetch sees it (same origin, the page's token).
async function apiStatus(path) {
  return page.evaluate(async (path) => {
    const token = sessionStorage.getItem('conveyor.token');
    const response = await fetch(new URL(`ui/api/${path}`, document.baseURI), {
      headers: token ? { Authorization: `Bearer ${token}` } : {},
    });
    return { status: response.status, challenge: response.headers.get('www-authenticate') };
  }, path);
}

async function signIn(token) {
  await page.goto(`${base}/ui`, { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => !document.getElementById('login').hidden, { timeout: STEP_TIMEOUT });
  const unauthenticated = await apiStatus('tasks');
  await page.type('#token', token);
  await page.click('#token-submit');
  await page.waitForFunction(() => !document.getElementById('view-tasks').hidden, { timeout: STEP_TIMEOUT });
  return unauthenticated;
}

const nodeStates = () =>
  page.$$eval('#dag g.node', (gs) =>
    gs.map((g) => ({
      nodeId: g.dataset.nodeId,
      status: g.dataset.status,
      attempt: Number(g.dataset.attempt),
      tool: g.dataset.tool,
      planner: g.hasAttribute('data-planner'),
      text: [...g.querySelectorAll('text')].map((t) => t.textContent).join(' | '),
    })),
  );

const edges = () =>
  page.$$eval('#dag path.edge', (paths) =>
    paths.map((p) => ({ from: p.dataset.from, to: p.dataset.to, planned: p.classList.contains('planned') })),
  );

try {
  // Alice, a principal without operator rights. The page asks for her token first.
  const alice = await browser.createBrowserContext();
  page = await openPage(alice);
  const refused = await signIn(tokens.alice);
  result.unauthenticated = refused;
  say('signed in', { principal: 'alice', unauthenticated: refused });

  const slowRow = `tr.task-row[data-task-id="${tasks.slow}"]`;
  await page.waitForSelector(slowRow, { timeout: STEP_TIMEOUT });
  result.principal = await page.$eval('#principal', (e) => e.textContent);
  result.operatorsTabShown = await page.$eval('#tab-operators', (e) => !e.hidden);

  // Progress moves with no reload: the same document (a marker set on it survives, its time
  // origin and the tab's page-load counter are unchanged, one navigation entry).
  const progressOf = () => page.$eval(`${slowRow} .progress`, (e) => Number(e.dataset.progress || 'NaN'));
  await page.evaluate(() => {
    window.conveyorTestMarker = 'set-before-the-first-reading';
  });
  const before = await page.evaluate(() => ({
    timeOrigin: performance.timeOrigin,
    loads: document.documentElement.dataset.pageLoads,
  }));
  const first = await progressOf();
  await sleep(1000);
  const second = await progressOf();
  const after = await page.evaluate(() => ({
    timeOrigin: performance.timeOrigin,
    loads: document.documentElement.dataset.pageLoads,
    marker: window.conveyorTestMarker ?? null,
    navigations: performance.getEntriesByType('navigation').length,
    navigationType: performance.getEntriesByType('navigation')[0]?.type ?? null,
  }));
  result.progress = { first, second, before, after };
  say('progress', result.progress);

  await page.waitForSelector(`tr.task-row[data-task-id="${tasks.dag}"]`, { timeout: STEP_TIMEOUT });
  result.aliceList = await page.$$eval('tr.task-row', (rows) =>
    rows.map((r) => ({ taskId: r.dataset.taskId, status: r.dataset.status })),
  );
  await shot('ui-list');

  // The 20-node graph (plus the node of the tool that planned it), drawn while it runs.
  await page.click(`tr.task-row[data-task-id="${tasks.dag}"]`);
  await page.waitForFunction(
    (id) => {
      // Drawn while it runs, once some parts are done and others still wait: every state shows.
      const detail = document.getElementById('task-detail');
      const nodes = [...document.querySelectorAll('#dag g.node')];
      const some = (status) => nodes.some((g) => g.dataset.status === status && !g.hasAttribute('data-planner'));
      return detail.dataset.taskId === id && some('running') && some('completed') && some('queued');
    },
    { timeout: STEP_TIMEOUT },
    tasks.dag,
  );
  // One more update, so that the drawing has caught up with the stream.
  await sleep(600);
  result.dag = {
    nodes: await nodeStates(),
    edges: await edges(),
    status: await page.$eval('#task-detail', (e) => e.dataset.status),
    cancelShown: await page.$eval('#cancel', (e) => !e.hidden),
  };
  say('dag', {
    nodes: result.dag.nodes.length,
    edges: result.dag.edges.length,
    states: result.dag.nodes.map((n) => `${n.nodeId}=${n.status}`).join(' '),
  });
  await shot('ui-dag');

  // Cancel from the page; the graph follows as the workers stop their nodes.
  await page.click('#cancel');
  await page.waitForFunction(() => document.getElementById('task-detail').dataset.status === 'cancelled', {
    timeout: STEP_TIMEOUT,
  });
  // The stream then brings the list's row and the nodes the workers stopped.
  await page.waitForFunction(
    (id) =>
      document.querySelector(`tr.task-row[data-task-id="${id}"]`)?.dataset.status === 'cancelled' &&
      ![...document.querySelectorAll('#dag g.node')].some((g) => ['running', 'queued'].includes(g.dataset.status)),
    { timeout: STEP_TIMEOUT },
    tasks.dag,
  );
  result.cancelled = {
    status: await page.$eval('#task-detail', (e) => e.dataset.status),
    badge: await page.$eval('#detail-status', (e) => e.textContent),
    cancelShown: await page.$eval('#cancel', (e) => !e.hidden),
    nodes: await nodeStates(),
    listStatus: await page.$eval(`tr.task-row[data-task-id="${tasks.dag}"]`, (r) => r.dataset.status),
  };
  say('cancelled', { status: result.cancelled.status, listStatus: result.cancelled.listStatus });
  await shot('ui-cancelled');

  // Another principal's task: not listed, not shown, and "not found" from the API, exactly as
  // an unknown task is; the operators' endpoint is refused.
  await page.evaluate((id) => {
    location.hash = `#task=${id}`;
  }, tasks.bobs);
  await page.waitForFunction(() => document.getElementById('detail-tool').textContent === 'Not found', {
    timeout: STEP_TIMEOUT,
  });
  result.othersTask = {
    shown: await page.$eval('#detail-tool', (e) => e.textContent),
    api: (await apiStatus(`tasks/${tasks.bobs}`)).status,
    unknownApi: (await apiStatus('tasks/00000000000000000000000000000000')).status,
    operatorsApi: (await apiStatus('operators')).status,
  };
  say('another principal', result.othersTask);
  await alice.close();

  // An operator: every principal's live tasks, and the Operators tab.
  const ops = await browser.createBrowserContext();
  page = await openPage(ops);
  await signIn(tokens.ops);
  await page.waitForSelector(slowRow, { timeout: STEP_TIMEOUT });
  result.operator = {
    principal: await page.$eval('#principal', (e) => e.textContent),
    tabShown: await page.$eval('#tab-operators', (e) => !e.hidden),
    list: await page.$$eval('tr.task-row', (rows) => rows.map((r) => r.dataset.taskId)),
  };
  await page.click('#tab-operators');
  await page.waitForFunction(
    () =>
      document.querySelectorAll('#view-operators [data-queue]').length > 0 &&
      document.querySelectorAll('#workers tbody tr[data-live="true"]').length > 0 &&
      document.querySelectorAll('#dead-letters tbody tr').length > 0,
    { timeout: STEP_TIMEOUT },
  );
  // Busy queues are table rows with their figures; idle ones are listed by name.
  result.operator.queues = await page.$$eval('#view-operators [data-queue]', (items) =>
    items.map((e) => ({ queue: e.dataset.queue, busy: e.tagName === 'TR', text: e.textContent })),
  );
  result.operator.workers = await page.$$eval('#workers tbody tr', (rows) =>
    rows.map((r) => ({ name: r.dataset.worker, live: r.dataset.live })),
  );
  result.operator.deadLetters = await page.$$eval('#dead-letters tbody tr', (rows) =>
    rows.map((r) => ({ id: r.dataset.deadLetterId, taskId: r.dataset.taskId, text: r.textContent })),
  );
  say('operators', {
    queues: result.operator.queues.length,
    workers: result.operator.workers.length,
    deadLetters: result.operator.deadLetters.length,
  });
  await shot('ui-operators');
  await ops.close();

  console.log(JSON.stringify({ result }));
  await browser.close();
} catch (error) {
  if (page) {
    try {
      await shot('ui-failure');
    } catch (_) {
      // The page is gone; the error says enough.
    }
  }
  console.log(JSON.stringify({ error: String(error && error.stack ? error.stack : error), result }));
  await browser.close();
  process.exit(1);
}
