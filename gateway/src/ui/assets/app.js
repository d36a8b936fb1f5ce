// Conveyor's web view. Plain JavaScript, no framework, no build step: it is compiled into the
// gateway as it is. The page holds no data; everything comes from the JSON API under ui/api/,
// with the bearer token (kept in sessionStorage) on every request. Live updates arrive on an
// event stream read with fetch(), since EventSource cannot send an Authorization header.
'use strict';

(() => {
  const TOKEN_KEY = 'conveyor.token';
  const LOADS_KEY = 'conveyor.pageLoads';
  const OPERATORS_EVERY_MS = 2000;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // Node statuses, in the order the legend shows them, with the label a person reads.
  const NODE_STATES = [
    ['pending', 'waiting'],
    ['queued', 'queued'],
    ['running', 'running'],
    ['retry_wait', 'retrying'],
    ['parked', 'needs input'],
    ['completed', 'completed'],
    ['failed', 'failed'],
    ['cancelled', 'cancelled'],
    ['skipped', 'skipped'],
  ];
  const TASK_LABELS = { input_required: 'input required' };
  // Node statuses that never change again.
  const SETTLED = new Set(['completed', 'failed', 'cancelled', 'skipped', 'dropped']);

  const state = {
    me: null,
    skewMs: 0,
    tasks: [],
    rows: new Map(),
    open: null,
    detail: null,
    graphKey: null,
    tab: 'tasks',
    stream: null,
    streamFailures: 0,
    reconnect: null,
    operatorsTimer: null,
  };

  const $ = (id) => document.getElementById(id);

  // Every load of the page is counted in this tab, so that a reload can be told from a live update.
  const loads = Number(sessionStorage.getItem(LOADS_KEY) || '0') + 1;
  sessionStorage.setItem(LOADS_KEY, String(loads));
  document.documentElement.dataset.pageLoads = String(loads);

  // ---------------------------------------------------------------- small helpers

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'text') node.textContent = value;
      else node.setAttribute(name, value === true ? '' : String(value));
    }
  }

  function serverNow() {
    return Date.now() + state.skewMs;
  }

  function formatDuration(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return '';
    ms = Math.max(0, ms);
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function formatTime(ms) {
    const d = new Date(ms);
    const today = new Date();
    const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
    return d.toDateString() === today.toDateString()
      ? time
      : `${d.toLocaleDateString([], { month: 'short', day: 'numeric' })} ${time}`;
  }

  function formatNumber(n) {
    if (n === null || n === undefined) return '';
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  function taskLabel(status) {
    return TASK_LABELS[status] || status;
  }

  function nodeLabel(status) {
    const found = NODE_STATES.find(([s]) => s === status);
    return found ? found[1] : status;
  }

  function shortId(id) {
    return id.length > 12 ? `${id.slice(0, 8)}…` : id;
  }

  function badge(status, label) {
    return el('span', { class: 'status', 'data-status': status, text: label });
  }

  // The fraction of a task that is done, or null when it cannot be told.
  function fraction(task) {
    if (task.status === 'completed') return 1;
    if (typeof task.progress === 'number' && typeof task.total === 'number' && task.total > 0) {
      return Math.min(1, Math.max(0, task.progress / task.total));
    }
    return null;
  }

  function setProgress(bar, task) {
    const f = fraction(task);
    bar.dataset.status = task.status;
    bar.dataset.progress = task.progress ?? '';
    bar.dataset.total = task.total ?? '';
    bar.classList.toggle('indeterminate', f === null && !task.terminal);
    bar.querySelector('.bar').style.width = f === null ? (task.terminal ? '0%' : '') : `${(f * 100).toFixed(1)}%`;
    return f;
  }

  // ---------------------------------------------------------------- requests

  class Unauthorized extends Error {}

  function apiUrl(path) {
    return new URL(`ui/api/${path}`, document.baseURI).toString();
  }

  function authHeaders() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  async function errorMessage(response) {
    try {
      const body = await response.json();
      if (typeof body.error === 'string') return body.error;
      if (body.error && body.error.message) return body.error.message;
    } catch (_) {
      // Not JSON: the status says enough.
    }
    return `${response.status} ${response.statusText}`;
  }

  async function request(path, options = {}) {
    const response = await fetch(apiUrl(path), {
      method: options.method || 'GET',
      headers: { Accept: 'application/json', ...authHeaders() },
      cache: 'no-store',
    });
    if (response.status === 401) throw new Unauthorized(await errorMessage(response));
    if (!response.ok) {
      const error = new Error(await errorMessage(response));
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  function showProblem(message) {
    const banner = $('problem');
    banner.textContent = message || '';
    banner.hidden = !message;
  }

  // ---------------------------------------------------------------- sign-in

  async function start() {
    try {
      state.me = await request('me');
    } catch (error) {
      if (error instanceof Unauthorized) {
        const hadToken = Boolean(sessionStorage.getItem(TOKEN_KEY));
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin(hadToken ? `That token was refused: ${error.message}` : null);
      } else {
        showProblem(`Cannot reach the gateway: ${error.message}. Retrying…`);
        setTimeout(start, 3000);
      }
      return;
    }
    state.skewMs = state.me.nowMs - Date.now();
    showProblem(null);
    showApp();
  }

  function showLogin(message) {
    stopStream();
    stopOperators();
    // Nothing of the last principal's stays on the page.
    state.tasks = [];
    state.rows.clear();
    $('task-rows').replaceChildren();
    state.open = null;
    state.detail = null;
    state.graphKey = null;
    $('task-detail').hidden = true;
    $('no-detail').hidden = false;
    $('login').hidden = false;
    $('tabs').hidden = true;
    $('who').hidden = true;
    $('view-tasks').hidden = true;
    $('view-operators').hidden = true;
    const error = $('login-error');
    error.textContent = message || '';
    error.hidden = !message;
    $('token').value = '';
    $('token').focus();
  }

  function showApp() {
    const me = state.me;
    $('login').hidden = true;
    $('tabs').hidden = false;
    $('who').hidden = false;
    $('principal').textContent = me.principal;
    $('operator-badge').hidden = !me.operator;
    $('tab-operators').hidden = !me.operator;
    $('sign-out').hidden = !me.authRequired;
    $('list-note').textContent = me.operator
      ? `Your tasks and every principal's unfinished tasks, newest first (at most ${me.listLimit}), live.`
      : `Your tasks, newest first (at most ${me.listLimit}), live.`;
    routeFromHash();
  }

  $('login-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    start();
  });

  $('sign-out').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    state.me = null;
    showLogin(null);
  });

  // ---------------------------------------------------------------- navigation

  function routeFromHash() {
    let hash = location.hash.slice(1);
    try {
      hash = decodeURIComponent(hash);
    } catch (_) {
      // Not an address this page made: read it as it is.
    }
    if (hash === 'operators' && state.me.operator) {
      selectTab('operators');
      return;
    }
    selectTab('tasks');
    const match = /^task=(.+)$/.exec(hash);
    openTask(match ? match[1] : null);
  }

  window.addEventListener('hashchange', () => {
    if (state.me) routeFromHash();
  });

  function selectTab(tab) {
    state.tab = tab;
    for (const button of document.querySelectorAll('.tab')) {
      button.setAttribute('aria-selected', String(button.dataset.tab === tab));
    }
    $('view-tasks').hidden = tab !== 'tasks';
    $('view-operators').hidden = tab !== 'operators';
    if (tab === 'operators') {
      startOperators();
    } else {
      stopOperators();
    }
    if (!state.stream) openStream();
  }

  for (const button of document.querySelectorAll('.tab')) {
    button.addEventListener('click', () => {
      const tab = button.dataset.tab;
      const hash = tab === 'operators' ? '#operators' : state.open ? `#task=${encodeURIComponent(state.open)}` : '#';
      if (location.hash !== hash) location.hash = hash;
      else selectTab(tab);
    });
  }

  // ---------------------------------------------------------------- the event stream

  function stopStream() {
    if (state.stream) state.stream.abort();
    state.stream = null;
    clearTimeout(state.reconnect);
  }

  function setLive(mode, title) {
    const live = $('live');
    live.dataset.state = mode;
    live.textContent = { live: 'live', connecting: 'connecting', offline: 'reconnecting' }[mode];
    live.title = title || '';
  }

  async function openStream() {
    stopStream();
    const controller = new AbortController();
    state.stream = controller;
    const query = state.open ? `?task=${encodeURIComponent(state.open)}` : '';
    setLive('connecting');
    let failure = null;
    try {
      const response = await fetch(apiUrl(`stream${query}`), {
        headers: { Accept: 'text/event-stream', ...authHeaders() },
        cache: 'no-store',
        signal: controller.signal,
      });
      if (response.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin('The token is no longer accepted; enter it again.');
        return;
      }
      if (!response.ok || !response.body) throw new Error(await errorMessage(response));
      setLive('live');
      state.streamFailures = 0;
      await readEvents(response.body, controller);
    } catch (error) {
      if (controller.signal.aborted) return;
      failure = error.message;
    }
    if (controller.signal.aborted || state.stream !== controller) return;
    // The gateway ends each stream after a while (and on shutdown): open the next one.
    state.streamFailures += 1;
    const wait = failure ? Math.min(10000, 500 * 2 ** Math.min(state.streamFailures, 5)) : 100;
    setLive(failure ? 'offline' : 'connecting', failure || '');
    state.reconnect = setTimeout(() => {
      if (state.stream === controller) openStream();
    }, wait);
  }

  async function readEvents(body, controller) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done || controller.signal.aborted) return;
      buffer += value.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = 'message';
        const data = [];
        for (const line of block.split('\n')) {
          if (line.startsWith(':')) continue;
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'event') name = text;
          else if (field === 'data') data.push(text);
        }
        if (data.length) handleEvent(name, data.join('\n'));
      }
    }
  }

  function handleEvent(name, text) {
    let data;
    try {
      data = JSON.parse(text);
    } catch (_) {
      return;
    }
    if (name === 'tasks') {
      state.tasks = data.tasks || [];
      renderList();
    } else if (name === 'task') {
      if (data.taskId === state.open) showDetail(data);
    } else if (name === 'missing') {
      if (data.taskId === state.open) showMissing(data.taskId);
    } else if (name === 'problem') {
      showProblem(data.error ? `Live updates are failing: ${data.error}` : null);
    }
  }

  // ---------------------------------------------------------------- the task list

  function renderList() {
    const body = $('task-rows');
    const seen = new Set();
    let previous = null;
    for (const task of state.tasks) {
      seen.add(task.taskId);
      let row = state.rows.get(task.taskId);
      if (!row) {
        row = makeRow(task);
        state.rows.set(task.taskId, row);
      }
      updateRow(row, task);
      // Keep the rows in the list's order without rebuilding them.
      const expected = previous ? previous.nextSibling : body.firstChild;
      if (expected !== row) body.insertBefore(row, expected);
      previous = row;
    }
    for (const [id, row] of state.rows) {
      if (!seen.has(id)) {
        row.remove();
        state.rows.delete(id);
      }
    }
    const count = state.tasks.length;
    $('task-count').textContent = count ? `${count}` : '';
    $('no-tasks').hidden = count > 0;
  }

  function makeRow(task) {
    const bar = el('div', { class: 'progress' }, el('div', { class: 'bar' }));
    const row = el(
      'tr',
      { class: 'task-row', 'data-task-id': task.taskId },
      el(
        'td',
        {},
        el('span', { class: 'tool' }),
        el('span', { class: 'sub', title: task.taskId }),
        el('span', { class: 'msg' }),
      ),
      el('td', {}, badge(task.status, taskLabel(task.status))),
      el('td', {}, el('div', { class: 'progress-cell' }, bar, el('span', { class: 'pct' }))),
      el('td', { class: 'when' }),
    );
    row.addEventListener('click', () => {
      location.hash = `#task=${encodeURIComponent(task.taskId)}`;
    });
    return row;
  }

  function updateRow(row, task) {
    row.dataset.status = task.status;
    row.classList.toggle('selected', task.taskId === state.open);
    row.querySelector('.tool').textContent = task.tool;
    const message = row.querySelector('.msg');
    message.textContent = task.statusMessage || '';
    message.title = task.statusMessage || '';
    const status = row.querySelector('.status');
    status.dataset.status = task.status;
    status.textContent = taskLabel(task.status);
    const f = setProgress(row.querySelector('.progress'), task);
    row.querySelector('.pct').textContent = f === null ? '' : `${Math.round(f * 100)}%`;
    row.querySelector('.sub').textContent = `${shortId(task.taskId)} · ${task.owner}`;
    const when = row.querySelector('.when');
    when.textContent = formatTime(task.createdAtMs);
    when.title = task.createdAt;
  }

  // ---------------------------------------------------------------- one task

  async function openTask(taskId) {
    const changed = taskId !== state.open;
    state.open = taskId;
    for (const [id, row] of state.rows) row.classList.toggle('selected', id === taskId);
    $('task-detail').hidden = !taskId;
    $('no-detail').hidden = Boolean(taskId);
    if (!changed) {
      if (!state.stream) openStream();
      return;
    }
    state.detail = null;
    state.graphKey = null;
    $('dag-wrap').replaceChildren();
    $('result').replaceChildren();
    $('cancel-error').hidden = true;
    // Follow the open task on the stream (it sends the task's detail whenever it changes).
    openStream();
    if (!taskId) return;
    try {
      const detail = await request(`tasks/${encodeURIComponent(taskId)}`);
      if (state.open === taskId && !state.detail) showDetail(detail);
    } catch (error) {
      if (error instanceof Unauthorized) showLogin('The token is no longer accepted; enter it again.');
      else if (error.status === 404 && state.open === taskId) showMissing(taskId);
    }
  }

  $('close-detail').addEventListener('click', () => {
    location.hash = '#';
  });

  function showMissing(taskId) {
    state.detail = null;
    state.graphKey = null;
    $('detail-tool').textContent = 'Not found';
    $('detail-id').textContent = taskId;
    const status = $('detail-status');
    status.hidden = true;
    $('detail-message').textContent = 'No such task: unknown, expired, or not yours.';
    $('detail-progress').hidden = true;
    $('detail-facts').replaceChildren();
    $('cancel').hidden = true;
    $('legend').replaceChildren();
    $('dag-wrap').replaceChildren();
    $('result').replaceChildren();
    $('arguments').textContent = '';
  }

  function showDetail(task) {
    state.detail = task;
    $('task-detail').dataset.taskId = task.taskId;
    $('task-detail').dataset.status = task.status;
    $('detail-tool').textContent = task.tool;
    $('detail-id').textContent = task.taskId;
    const status = $('detail-status');
    status.hidden = false;
    status.dataset.status = task.status;
    status.textContent = taskLabel(task.status);
    $('detail-message').textContent = task.statusMessage || '';
    const progress = $('detail-progress');
    progress.hidden = false;
    if (task.nodes.length > 1) {
      // A graph's progress is its settled nodes; a node's own progress shows in the message.
      const settled = task.nodes.filter((n) => SETTLED.has(n.status)).length;
      const f = setProgress(progress, { ...task, progress: settled, total: task.nodes.length });
      progress.querySelector('.label').textContent =
        `${Math.round(f * 100)}% · ${settled} of ${task.nodes.length} nodes settled`;
    } else {
      const f = setProgress(progress, task);
      const amounts = typeof task.total === 'number'
        ? `${formatNumber(task.progress ?? 0)} of ${formatNumber(task.total)}`
        : typeof task.progress === 'number' ? formatNumber(task.progress) : '';
      progress.querySelector('.label').textContent =
        f === null ? amounts : `${Math.round(f * 100)}%${amounts ? ` · ${amounts}` : ''}`;
    }
    renderFacts(task);
    const cancel = $('cancel');
    cancel.hidden = task.terminal;
    cancel.disabled = false;
    renderGraph(task);
    renderResult(task);
    // A graph keeps no arguments of its own: each node holds its own.
    $('arguments').textContent = task.arguments === null && task.nodes.length > 1
      ? '(a graph: each node has its own arguments)'
      : JSON.stringify(task.arguments, null, 2);
  }

  function renderFacts(task) {
    const counts = new Map();
    for (const node of task.nodes) counts.set(node.status, (counts.get(node.status) || 0) + 1);
    const summary = NODE_STATES.filter(([s]) => counts.has(s)).map(
      ([s, label]) => `${counts.get(s)} ${task.terminal && !SETTLED.has(s) ? 'not run' : label}`,
    );
    for (const [s, n] of counts) {
      if (!NODE_STATES.some(([known]) => known === s)) summary.push(`${n} ${s}`);
    }
    const elapsed = task.terminal
      ? el('dd', { text: formatDuration(task.updatedAtMs - task.createdAtMs) })
      : el('dd', { 'data-since': task.createdAtMs, text: formatDuration(serverNow() - task.createdAtMs) });
    const fact = (label, value) => el('div', {}, el('dt', { text: label }), value);
    $('detail-facts').replaceChildren(
      fact('Owner', el('dd', { text: task.owner })),
      fact('Started', el('dd', { text: formatTime(task.createdAtMs), title: task.createdAt })),
      fact(task.terminal ? 'Took' : 'Running for', elapsed),
      fact('Updated', el('dd', { text: formatTime(task.updatedAtMs), title: task.lastUpdatedAt })),
      fact(`${task.nodes.length} node${task.nodes.length === 1 ? '' : 's'}`, el('dd', { text: summary.join(', ') })),
    );
  }

  $('cancel').addEventListener('click', async () => {
    const taskId = state.open;
    if (!taskId) return;
    const button = $('cancel');
    button.disabled = true;
    $('cancel-error').hidden = true;
    try {
      const answer = await fetch(apiUrl(`tasks/${encodeURIComponent(taskId)}/cancel`), {
        method: 'POST',
        headers: { Accept: 'application/json', ...authHeaders() },
        cache: 'no-store',
      });
      if (answer.status === 401) {
        showLogin('The token is no longer accepted; enter it again.');
        return;
      }
      if (!answer.ok) throw new Error(await errorMessage(answer));
      const body = await answer.json();
      if (state.open === taskId) showDetail(body.task);
    } catch (error) {
      const message = $('cancel-error');
      message.textContent = `Could not cancel: ${error.message}`;
      message.hidden = false;
      button.disabled = false;
    }
  });

  // ---------------------------------------------------------------- the graph

  // Layers by longest path from the roots (nodes nothing waits for), so that every edge points
  // to a later layer; within a layer, nodes sit near the average place of their predecessors.
  function layout(task) {
    const nodes = new Map(task.nodes.map((n) => [n.nodeId, n]));
    const edges = [];
    for (const node of task.nodes) {
      for (const to of node.dependents || []) {
        if (nodes.has(to)) edges.push({ from: node.nodeId, to, planned: false });
      }
    }
    const incoming = new Map(task.nodes.map((n) => [n.nodeId, 0]));
    for (const e of edges) incoming.set(e.to, incoming.get(e.to) + 1);
    // A planning tool's node comes before the nodes it planned: drawn so, with dashed edges.
    if (task.plannedBy && nodes.has(task.plannedBy)) {
      for (const node of task.nodes) {
        if (node.nodeId !== task.plannedBy && incoming.get(node.nodeId) === 0) {
          edges.push({ from: task.plannedBy, to: node.nodeId, planned: true });
        }
      }
      for (const e of edges) if (e.planned) incoming.set(e.to, incoming.get(e.to) + 1);
    }
    const outgoing = new Map(task.nodes.map((n) => [n.nodeId, []]));
    const preds = new Map(task.nodes.map((n) => [n.nodeId, []]));
    for (const e of edges) {
      outgoing.get(e.from).push(e.to);
      preds.get(e.to).push(e.from);
    }
    const layer = new Map();
    const remaining = new Map(incoming);
    const ready = task.nodes.filter((n) => remaining.get(n.nodeId) === 0).map((n) => n.nodeId);
    for (const id of ready) layer.set(id, 0);
    while (ready.length) {
      const id = ready.shift();
      for (const to of outgoing.get(id)) {
        layer.set(to, Math.max(layer.get(to) || 0, layer.get(id) + 1));
        remaining.set(to, remaining.get(to) - 1);
        if (remaining.get(to) === 0) ready.push(to);
      }
    }
    // A graph is acyclic by construction; a node left over is drawn in the first layer anyway.
    for (const node of task.nodes) if (!layer.has(node.nodeId)) layer.set(node.nodeId, 0);
    const layers = [];
    for (const node of task.nodes) {
      const l = layer.get(node.nodeId);
      (layers[l] = layers[l] || []).push(node.nodeId);
    }
    const natural = (a, b) => a.localeCompare(b, undefined, { numeric: true });
    const position = new Map();
    layers.forEach((ids, l) => {
      if (l === 0) {
        ids.sort(natural);
      } else {
        const weight = (id) => {
          const ps = preds.get(id).filter((p) => position.has(p));
          return ps.length ? ps.reduce((sum, p) => sum + position.get(p), 0) / ps.length : 0;
        };
        ids.sort((a, b) => weight(a) - weight(b) || natural(a, b));
      }
      ids.forEach((id, i) => position.set(id, i - (ids.length - 1) / 2));
    });
    return { nodes, edges, layers };
  }

  const BOX = { w: 244, h: 46, gapX: 70, gapY: 8, pad: 20 };

  function renderGraph(task) {
    const wrap = $('dag-wrap');
    renderLegend(task);
    if (!task.nodes.length) {
      state.graphKey = null;
      wrap.replaceChildren(el('p', { class: 'empty', text: 'No nodes are recorded for this task.' }));
      return;
    }
    const key = JSON.stringify([task.plannedBy, task.nodes.map((n) => [n.nodeId, n.dependents || []])]);
    if (key === state.graphKey && wrap.firstChild) {
      for (const node of task.nodes) {
        const g = wrap.querySelector(`g.node[data-node-id="${CSS.escape(node.nodeId)}"]`);
        if (g) updateNode(g, node, task);
      }
      return;
    }
    state.graphKey = key;
    const { nodes, edges, layers } = layout(task);
    const tallest = Math.max(1, ...layers.map((ids) => ids.length));
    const width = BOX.pad * 2 + layers.length * BOX.w + (layers.length - 1) * BOX.gapX;
    const height = BOX.pad * 2 + tallest * BOX.h + (tallest - 1) * BOX.gapY;
    const place = new Map();
    layers.forEach((ids, l) => {
      const top = BOX.pad + ((tallest - ids.length) * (BOX.h + BOX.gapY)) / 2;
      ids.forEach((id, i) => place.set(id, { x: BOX.pad + l * (BOX.w + BOX.gapX), y: top + i * (BOX.h + BOX.gapY) }));
    });
    const root = svg('svg', {
      id: 'dag',
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: 'img',
      'aria-label': `Graph of ${task.nodes.length} nodes`,
      'data-node-count': task.nodes.length,
      'data-edge-count': edges.length,
    });
    root.append(
      svg(
        'defs',
        {},
        svg(
          'marker',
          { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
          svg('path', { class: 'arrow', d: 'M 0 0 L 10 5 L 0 10 z' }),
        ),
      ),
    );
    const edgeLayer = svg('g', { class: 'edges' });
    for (const e of edges) {
      const a = place.get(e.from);
      const b = place.get(e.to);
      const x1 = a.x + BOX.w;
      const y1 = a.y + BOX.h / 2;
      const x2 = b.x - 2;
      const y2 = b.y + BOX.h / 2;
      const bend = Math.max(24, (x2 - x1) / 2);
      edgeLayer.append(
        svg('path', {
          class: e.planned ? 'edge planned' : 'edge',
          d: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`,
          'marker-end': 'url(#arrow)',
          'data-from': e.from,
          'data-to': e.to,
        }),
      );
    }
    root.append(edgeLayer);
    const nodeLayer = svg('g', { class: 'nodes' });
    for (const [id, node] of nodes) {
      const p = place.get(id);
      const g = svg(
        'g',
        { class: 'node', transform: `translate(${p.x} ${p.y})`, 'data-node-id': id, 'data-planner': id === task.plannedBy },
        svg('title', {}),
        svg('rect', { class: 'box', width: BOX.w, height: BOX.h, rx: 7 }),
        svg('rect', { class: 'stripe', width: 4, height: BOX.h - 12, x: 0, y: 6, rx: 2 }),
        svg('text', { class: 'id', x: 14, y: 19 }),
        svg('text', { class: 'state', x: BOX.w - 10, y: 19, 'text-anchor': 'end' }),
        svg('text', { class: 'meta', x: 14, y: 36 }, svg('tspan', { class: 'tool' }), svg('tspan', { class: 'attempts' })),
        svg('text', { class: 'meta duration', x: BOX.w - 10, y: 36, 'text-anchor': 'end' }),
      );
      updateNode(g, node, task);
      nodeLayer.append(g);
    }
    root.append(nodeLayer);
    wrap.replaceChildren(root);
    // A graph a little wider than the pane is scaled to fit; a much wider one scrolls instead,
    // so that its text stays readable.
    const room = wrap.clientWidth - 2;
    if (width > room && room / width >= 0.6) {
      root.style.width = '100%';
      root.style.height = 'auto';
    }
  }

  function clip(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function updateNode(g, node, task) {
    g.dataset.status = node.status;
    g.dataset.attempt = node.attempt;
    g.dataset.tool = node.tool;
    g.dataset.durationMs = node.durationMs ?? '';
    g.querySelector('.id').textContent = clip(node.nodeId, 20);
    // A node still waiting when its task ended never runs.
    g.querySelector('.state').textContent =
      task.terminal && !SETTLED.has(node.status) ? 'not run' : nodeLabel(node.status);
    const tool = node.builtin ? `${node.tool} (built-in)` : node.tool;
    g.querySelector('.tool').textContent = clip(tool, 18);
    g.querySelector('.attempts').textContent = node.nodeId === task.plannedBy
      ? ' · planner'
      : node.attempt === 0 ? ' · not started' : ` · ${node.attempt} attempt${node.attempt === 1 ? '' : 's'}`;
    const duration = g.querySelector('.duration');
    if (node.durationMs !== null && node.durationMs !== undefined) {
      duration.removeAttribute('data-since');
      duration.textContent = formatDuration(node.durationMs);
    } else if (node.startedAtMs && !task.terminal && node.status === 'running') {
      duration.setAttribute('data-since', node.startedAtMs);
      duration.textContent = formatDuration(serverNow() - node.startedAtMs);
    } else {
      duration.removeAttribute('data-since');
      duration.textContent = '';
    }
    const lines = [`${node.nodeId}: ${nodeLabel(node.status)}`, `tool: ${tool}`];
    if (node.worker) lines.push(`worker: ${node.worker}`);
    if (node.error) lines.push(`error: ${node.error.message || JSON.stringify(node.error)}`);
    g.querySelector('title').textContent = lines.join('\n');
  }

  function renderLegend(task) {
    const present = new Set(task.nodes.map((n) => n.status));
    $('legend').replaceChildren(
      ...NODE_STATES.filter(([s]) => present.has(s)).map(([s, label]) =>
        el('span', { 'data-status': s }, el('i', {}), task.terminal && !SETTLED.has(s) ? 'not run' : label),
      ),
    );
  }

  // ---------------------------------------------------------------- the result

  // A text block that holds a JSON object or array is shown indented.
  function readable(text) {
    const trimmed = text.trim();
    if (!(trimmed.startsWith('{') || trimmed.startsWith('['))) return text;
    try {
      return JSON.stringify(JSON.parse(trimmed), null, 2);
    } catch (_) {
      return text;
    }
  }

  function renderResult(task) {
    const box = $('result');
    if (task.error) {
      box.replaceChildren(
        el(
          'div',
          { class: 'block is-error', id: 'result-error' },
          el('div', { class: 'kind', text: `error ${task.error.code}` }),
          task.error.message,
        ),
      );
      return;
    }
    const result = task.result;
    if (!result) {
      const why = task.status === 'cancelled'
        ? 'The task was cancelled before it had a result.'
        : task.terminal
          ? 'The task ended without a result.'
          : 'The result appears here when the task finishes.';
      box.replaceChildren(el('p', { class: 'pending', text: why }));
      return;
    }
    const blocks = [];
    const errorClass = result.isError ? ' is-error' : '';
    for (const item of result.content || []) {
      if (item.type === 'text') {
        blocks.push(el('div', { class: `block text${errorClass}` }, readable(item.text)));
      } else if (item.type === 'image' && typeof item.data === 'string') {
        blocks.push(
          el('div', { class: `block${errorClass}` }, el('img', { alt: 'image result', src: `data:${item.mimeType};base64,${item.data}` })),
        );
      } else if (item.type === 'resource' && item.resource) {
        blocks.push(
          el(
            'div',
            { class: `block${errorClass}` },
            el('div', { class: 'kind', text: item.resource.uri || 'resource' }),
            item.resource.text ?? '(binary content)',
          ),
        );
      } else {
        blocks.push(
          el('div', { class: `block${errorClass}` }, el('div', { class: 'kind', text: item.type }), JSON.stringify(item, null, 2)),
        );
      }
    }
    if (result.structuredContent !== undefined && !(result.content || []).length) {
      blocks.push(el('div', { class: 'block' }, JSON.stringify(result.structuredContent, null, 2)));
    }
    if (!blocks.length) blocks.push(el('p', { class: 'pending', text: 'The result has no content.' }));
    box.replaceChildren(...blocks);
  }

  // ---------------------------------------------------------------- operators

  function startOperators() {
    if (state.operatorsTimer) return;
    const poll = async () => {
      try {
        renderOperators(await request('operators'));
      } catch (error) {
        if (error instanceof Unauthorized) {
          showLogin('The token is no longer accepted; enter it again.');
          return;
        }
        $('ops-updated').textContent = `Update failed: ${error.message}`;
      }
      if (state.operatorsTimer) state.operatorsTimer = setTimeout(poll, OPERATORS_EVERY_MS);
    };
    state.operatorsTimer = setTimeout(poll, 0);
  }

  function stopOperators() {
    clearTimeout(state.operatorsTimer);
    state.operatorsTimer = null;
  }

  function chips(values) {
    return el('div', { class: 'chips' }, ...values.map((v) => el('span', { class: 'chip', text: v })));
  }

  function renderOperators(data) {
    $('ops-updated').textContent = `updated ${formatTime(Date.now())}, every ${OPERATORS_EVERY_MS / 1000} s`;
    // Busy queues first, in a table; idle ones (nothing waiting, running or undelivered) as a list.
    const busy = data.queues.filter((q) => q.entries || q.pending || q.lag);
    const idle = data.queues.filter((q) => !(q.entries || q.pending || q.lag));
    busy.sort((a, b) => b.entries - a.entries || a.queue.localeCompare(b.queue));
    $('queues').tBodies[0].replaceChildren(
      ...busy.map((q) =>
        el(
          'tr',
          { 'data-queue': q.queue },
          el('td', {}, el('span', { class: 'chip', text: q.queue })),
          el('td', { class: 'num', text: q.entries }),
          el('td', { class: 'num', text: q.pending }),
          el('td', { class: 'num', text: q.lag }),
          el('td', { class: 'num', text: q.workers }),
        ),
      ),
    );
    $('no-busy-queues').hidden = busy.length > 0;
    $('idle-count').textContent = `${idle.length} idle queue${idle.length === 1 ? '' : 's'}`;
    $('idle-queues').replaceChildren(
      ...idle.map((q) =>
        el('span', { class: 'chip', 'data-queue': q.queue, title: `${q.workers} live worker(s)`, text: q.queue }),
      ),
    );
    $('idle').hidden = idle.length === 0;
    $('workers').tBodies[0].replaceChildren(
      ...data.workers.map((w) =>
        el(
          'tr',
          { 'data-worker': w.name, 'data-live': String(w.live) },
          el('td', {}, el('div', { class: 'name', text: w.name }), el('div', { class: 'mono', text: [w.host, w.pid ? `pid ${w.pid}` : ''].filter(Boolean).join(' · ') })),
          el('td', {}, el('span', { class: w.live ? 'badge ok' : 'badge stale', text: w.live ? 'live' : 'silent' })),
          el(
            'td',
            {},
            el('div', { class: 'num-inline', text: `${w.running.length} of ${w.concurrency}` }),
            chips(w.running.map((r) => `${r.tool} ${shortId(r.taskId)}/${r.nodeId}`)),
          ),
          el(
            'td',
            {},
            el('details', {}, el('summary', { text: `${w.queues.length} queue${w.queues.length === 1 ? '' : 's'}` }), chips(w.queues)),
          ),
          el('td', { class: 'when', text: `${formatDuration(w.heartbeatAgeMs)} ago` }),
        ),
      ),
    );
    const letters = data.deadLetters;
    $('dead-total').textContent = letters.total > letters.newest.length
      ? `${letters.total} (newest ${letters.newest.length} shown)`
      : `${letters.total}`;
    $('dead-letters').tBodies[0].replaceChildren(
      ...letters.newest.map((l) =>
        el(
          'tr',
          { 'data-dead-letter-id': l.id, 'data-task-id': l.taskId },
          el('td', { class: 'when', text: formatTime(l.atMs), title: l.at }),
          el('td', {}, el('span', { class: 'chip', text: l.tool })),
          el('td', { class: 'mono', text: `${shortId(l.taskId)} / ${l.nodeId}`, title: l.taskId }),
          el('td', { text: l.owner }),
          el('td', { class: 'num', text: l.attempts }),
          el('td', { class: 'errtext', text: (l.error && l.error.message) || JSON.stringify(l.error) }),
        ),
      ),
    );
    $('no-dead-letters').hidden = letters.newest.length > 0;
  }

  // ---------------------------------------------------------------- clocks

  // Running durations tick between updates from the gateway.
  setInterval(() => {
    for (const node of document.querySelectorAll('[data-since]')) {
      node.textContent = formatDuration(serverNow() - Number(node.getAttribute('data-since')));
    }
  }, 1000);

  start();
})();
