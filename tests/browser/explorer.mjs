// explorer.mjs: the explorer page (GET /) in a real browser -- Debian's
// headless Chromium driven by puppeteer-core.  tests/http/test_explorer.py
// runs it against a server it started:
//
//   node explorer.mjs draw URL SHOTS_DIR SCALE   every chart, a redraw, an error
//   node explorer.mjs key  URL KEY SHOTS_DIR SCALE   API-key mode
//   node explorer.mjs cors PAGE_URL API_URL KEY SHOTS_DIR SCALE
//                 a page of another origin (PAGE_URL, served by the test)
//                 calls attnbiasd at API_URL with fetch; prints what its
//                 script saw and what the browser said, as one JSON line
//
// Every wait is for an event of the page (the body's data-ready / -failed
// generation counters, watched by a MutationObserver), bounded by a generous
// timeout times SCALE, never a sleep.  One line per check, "ok NAME" or
// "FAIL NAME" with the reason; the exit status is 1 when any check failed.

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

const CHROMIUM = "/usr/bin/chromium";
const [mode, url, ...rest] = process.argv.slice(2);
const api = mode === "cors" ? rest.shift() : undefined;
const key = mode === "key" || mode === "cors" ? rest.shift() : undefined;
const [shots, scaleArg] = rest;
const SCALE = Number(scaleArg || 1);
const T = 120_000 * SCALE; // one drawing (or a page load) on a loaded machine

let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n  ${String(e && e.stack ? e.stack : e).replace(/\n/g, "\n  ")}`);
  }
}

function assert(cond, what) {
  if (!cond) throw new Error(typeof what === "string" ? what : JSON.stringify(what));
}

/* ---- the browser and what a page reports ------------------------------ */

async function launch() {
  // As root Chromium runs only without its sandbox; the other flags keep it
  // off the network on its own and leave nothing behind.
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", "--no-first-run", "--hide-scrollbars", "--mute-audio"],
    protocolTimeout: 2 * T,
    timeout: T,
    defaultViewport: { width: 1280, height: 900 },
  });
}

/* A page whose console errors, exceptions, failed loads and requests are
 * recorded.  Requests the page itself aborts (a newer drawing replaces an
 * older one) are not failures. */
async function openPage(browser) {
  const page = await browser.newPage();
  page.setDefaultTimeout(T);
  const problems = [], requests = [];
  page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
  page.on("pageerror", (e) => problems.push("exception: " + e.message));
  page.on("requestfailed", (r) => {
    const why = r.failure() ? r.failure().errorText : "";
    if (why !== "net::ERR_ABORTED") problems.push(`failed: ${r.method()} ${r.url()} ${why}`);
  });
  page.on("request", (r) => requests.push({ method: r.method(), url: r.url(),
                                            auth: r.headers()["authorization"] }));
  return { page, problems, requests };
}

/* The latest drawing's number, finished or failed. */
const GENERATION = `Math.max(Number(document.body.dataset.ready || 0),
                             Number(document.body.dataset.failed || 0))`;

async function generation(page) {
  return page.evaluate(GENERATION);
}

/* Wait for a drawing later than `after` to end and for `extra` (a JS
 * expression) to hold; true if that drawing succeeded. */
async function settle(page, after = 0, extra = "true") {
  await page.waitForFunction(
    `document.body.dataset.busy === '0' && ${GENERATION} > ${after} && (${extra})`,
    { polling: "mutation", timeout: T });
  return page.evaluate(`document.body.dataset.ready === String(${GENERATION})`);
}

/* How many points each drawn series of an SVG chart has. */
async function points(page, id) {
  return page.$$eval(`#${id} path`, (ps) =>
    ps.map((p) => (p.getAttribute("d").match(/[MLHV]/g) || []).length));
}

/* Distinct colours of the heatmap canvas (sampled). */
async function heatmapColours(page) {
  return page.$eval("#heatmap", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data, s = new Set();
    for (let i = 0; i < d.length; i += 4 * 7) s.add(`${d[i]},${d[i + 1]},${d[i + 2]}`);
    return s.size;
  });
}

/* Type into a field as a person does: focus, select all, type. */
async function typeInto(page, id, text) {
  await page.focus(`#${id}`);
  await page.keyboard.down("Control");
  await page.keyboard.press("a");
  await page.keyboard.up("Control");
  await page.keyboard.type(text);
}

async function shot(page, name) {
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, `explorer-${name}.png`), fullPage: true });
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

/* The server's own answer to a request, for its message. */
async function problemOf(path, body) {
  const r = await fetch(url + path, { method: "POST", body: JSON.stringify(body),
                                      headers: { "Content-Type": "application/json" } });
  return r.json();
}

/* ---- draw: the charts, a redraw, a bad value, the bias families -------- */

async function draw(browser) {
  const { page, problems, requests } = await openPage(browser);

  await check("the page loads and draws without a console error", async () => {
    await page.goto(url + "/", { waitUntil: "load" });
    assert(await settle(page), await text(page, "#error"));
    assert(problems.length === 0, problems);
  });

  await check("every RoPE chart has content, from the API", async () => {
    for (const chart of ["chart-qk", "chart-wavelength", "chart-decay", "chart-planner"]) {
      const pts = await points(page, chart);
      assert(pts.length && Math.max(...pts) > 20, `${chart}: ${pts}`);
    }
    assert((await points(page, "chart-planner")).length === 6, "a line per planner method");
    const rows = await page.$$eval("#planner-table tbody tr", (r) => r.length);
    assert(rows === 6, `planner rows ${rows}`);
    assert((await text(page, "#planner-table")).includes("yarn"), "yarn in the planner");
    const sent = new Set(requests.map((r) => `${r.method} ${r.url.replace(url, "")}`));
    for (const route of ["POST /v1/analysis", "POST /v1/rope"])
      assert(sent.has(route), `${route} not sent: ${[...sent]}`);
    const outside = requests.filter((r) => !r.url.startsWith(url) && !r.url.startsWith("data:"));
    assert(outside.length === 0, outside);
    await shot(page, "rope");
  });

  await check("a field change redraws", async () => {
    const before = await page.$eval("#chart-wavelength", (s) => Number(s.dataset.draws || 0));
    const g = await generation(page);
    await typeInto(page, "seq_len", "65536");
    const labels = `Array.from(document.querySelectorAll('#chart-wavelength .marklabel'))
                    .some((t) => t.textContent === 'seq_len 65536')`;
    assert(await settle(page, g, labels), await text(page, "#error"));
    const after = await page.$eval("#chart-wavelength", (s) => Number(s.dataset.draws || 0));
    assert(after > before, `draws ${before} -> ${after}`);
  });

  await check("a bad value shows the server's message next to its field", async () => {
    const want = await problemOf("/v1/analysis", {
      kind: "rope", seq_len: 65536, head_dim: 128, rope_theta: -5, partial_rotary_factor: 1,
      max_position_embeddings: 131072 });
    assert(want.field === "/rope_theta" && want.detail, want);
    const g = await generation(page);
    await typeInto(page, "rope_theta", "-5");
    const shown = `document.getElementById('rope_theta').parentElement
                   .querySelector('.err').textContent !== ''`;
    assert(!(await settle(page, g, shown)), "the page drew with rope_theta -5");
    const msg = await page.$eval("#rope_theta", (e) => e.parentElement.querySelector(".err").textContent);
    assert(msg === want.detail, { shown: msg, server: want.detail });
    assert(await page.$eval("#rope_theta", (e) => e.classList.contains("invalid")), "not marked");
    await shot(page, "error");
    const g2 = await generation(page);
    await typeInto(page, "rope_theta", "500000");
    const cleared = `document.getElementById('rope_theta').parentElement
                     .querySelector('.err').textContent === ''`;
    assert(await settle(page, g2, cleared), await text(page, "#error"));
  });

  await check("every bias family's charts have content", async () => {
    for (const [preset, charts, name] of [
      ["MPT-7B (ALiBi, 32 heads)", ["chart-bias", "chart-reach"], "alibi"],
      ["T5-base (32 buckets, random table)", ["chart-bias", "chart-reach", "chart-buckets"], "t5"],
      ["Kerple log, 4 heads", ["chart-bias", "chart-reach"], "kerple"],
    ]) {
      const g = await generation(page);
      await page.select("#preset", preset);
      assert(await settle(page, g), `${preset}: ${await text(page, "#error")}`);
      for (const chart of charts) {
        const pts = await points(page, chart);
        assert(pts.length && Math.max(...pts) > 1, `${preset} ${chart}: ${pts}`);
      }
      const colours = await heatmapColours(page);
      assert(colours > 8, `${preset}: heatmap of ${colours} colours`);
      assert(await page.$eval("#chart-qk", (e) => e.closest("figure").hidden), "q.k shown for a bias");
      await shot(page, name);
    }
    assert(requests.some((r) => r.method === "POST" && r.url === url + "/v1/bias"), "no /v1/bias");
    // The only complaints: the 400 of the bad value above.
    const late = problems.filter((p) => !p.includes("status of 400"));
    assert(late.length === 0, late);
  });
}

/* ---- key: the page asks for the key and sends it as a Bearer header ---- */

async function keyed(browser) {
  const { page, problems, requests } = await openPage(browser);

  await check("API-key mode asks for the key, sends it as Bearer and draws", async () => {
    await page.goto(url + "/", { waitUntil: "load" });
    await page.waitForSelector("#keyform:not([hidden])", { visible: true, timeout: T });
    await shot(page, "key");
    const g = await generation(page);
    await page.type("#apikey", key);
    await page.click("#keyform button[type=submit]");
    assert(await settle(page, g), await text(page, "#error"));
    assert((await points(page, "chart-wavelength")).some((n) => n > 20), "no wavelengths");
    assert(await page.$eval("#keyform", (f) => f.hidden), "the key form stays");
    const api = requests.filter((r) => r.url.startsWith(url + "/v1/"));
    const keyedCalls = api.filter((r) => r.auth === `Bearer ${key}`);
    assert(keyedCalls.length >= 2, api);
    // Before the key: no Authorization at all; after it, every call has it.
    const first = api.findIndex((r) => r.auth !== undefined);
    assert(first > 0 && api.slice(first).every((r) => r.auth === `Bearer ${key}`), api);
    // The page and its assets were fetched without a key.
    assert(requests.filter((r) => !r.url.includes("/v1/")).every((r) => r.auth === undefined),
           "a key sent for the page's files");
    // Only the 401s before the key may have complained.
    const late = problems.filter((p) => !p.includes("status of 401"));
    assert(late.length === 0, late);
  });
}

/* ---- cors: fetch from a page of another origin ------------------------ */

/* The page's script (written by test_explorer.py) defines runCalls(api,
 * key), which makes its calls and resolves to what it could read of each.
 * What the browser itself reported -- a CORS refusal is a console error of
 * the page, the script sees only a TypeError -- goes beside it; the checks
 * are the Python test's. */
async function crossOrigin(browser) {
  const { page, problems, requests } = await openPage(browser);

  await check("a page of another origin calls the API", async () => {
    await page.goto(url, { waitUntil: "load" });
    const calls = await page.evaluate((a, k) => window.runCalls(a, k), api, key);
    const sent = requests.map((r) => `${r.method} ${r.url}`);
    console.log(JSON.stringify({ calls, problems, sent }));
  });
}

const modes = { draw, key: keyed, cors: crossOrigin };
const browser = await launch();
try {
  await modes[mode](browser);
} finally {
  await browser.close();
}
console.log(`${failed ? "FAILED" : "passed"}`);
process.exit(failed ? 1 : 0);
