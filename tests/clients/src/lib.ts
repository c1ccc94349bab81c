// lib.ts: what both client programs share -- a small check harness, float64
// references written here from the formulas of docs/methods.md (never from
// the server's answers), readers of the binary answers (safetensors, .npy,
// PNG) and comparisons.  The programs take the server's URL, and the URL and
// key of a second server started with --api-key-file, on the command line.

import { deepStrictEqual } from "node:assert/strict";

// ---------------------------------------------------------------- harness

let passed = 0;
let failed = 0;

/** Run one named check; a throw is a failure, printed with its message. */
export async function check(name: string, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    const msg = e instanceof Error ? (e.stack ?? e.message) : String(e);
    console.log(`FAIL ${name}\n${msg}`);
  }
}

/** Print the summary line tests/clients/test_clients.py reads; exit 1 on a failure. */
export function finish(): void {
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}

export function assert(cond: unknown, msg: string): asserts cond {
  if (!cond) throw new Error(msg);
}

export interface Args {
  url: string;
  keyedUrl: string;
  key: string;
}

export function parseArgs(): Args {
  const [url, keyedUrl, key] = process.argv.slice(2);
  if (!url || !keyedUrl || !key) throw new Error("usage: node PROGRAM URL KEYED_URL KEY");
  return { url, keyedUrl, key };
}

// ---------------------------------------------------------------- values

/** A JSON answer's number: a number, or "inf", "-inf", "nan". */
export type Wire = number | "inf" | "-inf" | "nan";

export function num(v: Wire): number {
  if (typeof v === "number") return v;
  return v === "inf" ? Infinity : v === "-inf" ? -Infinity : NaN;
}

/** A tensor of a JSON answer (the OutputTensor schema), as plain numbers. */
export interface Tensor {
  shape: number[];
  dtype: string;
  data?: Wire[];
  b64?: string;
}

/** A JSON answer's outputs by name. */
export type Tensors = { [name: string]: Tensor | undefined };

export function values(t: Tensor | undefined, what: string): number[] {
  assert(t !== undefined, `${what}: missing from the answer`);
  assert(t.data !== undefined && t.b64 === undefined, `${what}: want data, not b64`);
  return t.data.map(num);
}

/** Equal within tol (absolute, or relative to |want| when larger). */
export function close(got: number[], want: number[], tol: number, what: string): void {
  assert(got.length === want.length, `${what}: ${got.length} values, want ${want.length}`);
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!, w = want[i]!;
    if (g === w) continue; // also the infinities
    const err = Math.abs(g - w);
    assert(Number.isFinite(w) && err <= tol * Math.max(1, Math.abs(w)),
      `${what}[${i}] = ${g}, want ${w} (tolerance ${tol})`);
  }
}

export function same(got: unknown, want: unknown, what: string): void {
  try {
    deepStrictEqual(got, want);
  } catch (e) {
    throw new Error(`${what}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** Float32 values of the server (shortest decimal text that reads back as
 * the float32) against the same values read from a binary answer. */
export function sameF32(got: Float32Array, want: number[], what: string): void {
  assert(got.length === want.length, `${what}: ${got.length} values, want ${want.length}`);
  for (let i = 0; i < want.length; i++)
    assert(Object.is(got[i], Math.fround(want[i]!)) || (got[i] === 0 && want[i] === 0),
      `${what}[${i}]: binary ${got[i]}, JSON ${want[i]}`);
}

// ------------------------------------------------------- float64 references

/** Column c of position p is bit c of p (least significant first). */
export function binaryEncoding(positions: number[], dim: number): number[] {
  return positions.flatMap((p) => Array.from({ length: dim }, (_, c) => Math.floor(p / 2 ** c) % 2));
}

/** Paper layout: column 2k is sin(p / base^(2k/dim)), column 2k+1 its cos. */
export function sinusoidal(n: number, dim: number, base = 10000): number[] {
  const out: number[] = [];
  for (let p = 0; p < n; p++)
    for (let c = 0; c < dim; c++) {
      const a = p / base ** ((2 * Math.floor(c / 2)) / dim);
      out.push(c % 2 ? Math.cos(a) : Math.sin(a));
    }
  return out;
}

/** RoPE frequencies theta^(-2i/d), i < d/2. */
export function invFreq(headDim: number, theta = 10000): number[] {
  return Array.from({ length: headDim / 2 }, (_, i) => theta ** ((-2 * i) / headDim));
}

/** cos or sin tables [n, d] in the rotate-half layout (both halves alike). */
export function ropeTable(fn: (x: number) => number, positions: number[], headDim: number): number[] {
  const f = invFreq(headDim);
  return positions.flatMap((p) => [...f, ...f].map((w) => fn(p * w)));
}

/** Rows of x [n, d] rotated at their positions, pairs (i, i + d/2). */
export function ropeApply(x: number[][], positions: number[]): number[] {
  return x.flatMap((row, r) => {
    const h = row.length / 2, f = invFreq(row.length), out = new Array<number>(row.length);
    for (let i = 0; i < h; i++) {
      const a = positions[r]! * f[i]!, x1 = row[i]!, x2 = row[i + h]!;
      out[i] = x1 * Math.cos(a) - x2 * Math.sin(a);
      out[i + h] = x2 * Math.cos(a) + x1 * Math.sin(a);
    }
    return out;
  });
}

/** Causal ALiBi [heads, n, n] (queries the last n positions of n keys),
 * slopes 2^(-8(h+1)/heads): -slope * (i - j), -inf above the diagonal. */
export function alibiCausal(heads: number, n: number): number[] {
  const out: number[] = [];
  for (let h = 0; h < heads; h++)
    for (let i = 0; i < n; i++)
      for (let j = 0; j < n; j++)
        out.push(j > i ? -Infinity : -(2 ** ((-8 * (h + 1)) / heads)) * (i - j));
  return out;
}

/** Causal Kerple, logarithmic: -r1 * ln(1 + r2 * (i - j)). */
export function kerpleLogCausal(r1: number, r2: number, n: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++) out.push(j > i ? -Infinity : -r1 * Math.log(1 + r2 * (i - j)));
  return out;
}

export interface Attention {
  output: number[];
  lse: number[];
  weights: number[];
}

/** One head: softmax(q k^T / sqrt(D)) v with a bottom-right causal mask. */
export function attentionCausal(q: number[][], k: number[][], v: number[][]): Attention {
  const res: Attention = { output: [], lse: [], weights: [] };
  const off = k.length - q.length, scale = 1 / Math.sqrt(q[0]!.length);
  q.forEach((qr, r) => {
    const s = k.map((kr, j) => (j <= off + r ? scale * kr.reduce((a, x, d) => a + x * qr[d]!, 0) : -Infinity));
    const m = Math.max(...s), e = s.map((x) => Math.exp(x - m)), z = e.reduce((a, x) => a + x, 0);
    const w = e.map((x) => x / z);
    res.weights.push(...w);
    res.lse.push(m + Math.log(z));
    for (let d = 0; d < v[0]!.length; d++) res.output.push(w.reduce((a, x, j) => a + x * v[j]![d]!, 0));
  });
  return res;
}

// ---------------------------------------------------------- binary answers

export interface BinTensor {
  dtype: string;
  shape: number[];
  values: Float32Array;
}

/** A safetensors file: its float32 tensors by name, and __metadata__. */
export function readSafetensors(buf: ArrayBuffer): { tensors: Map<string, BinTensor>; meta: Record<string, string> } {
  const view = new DataView(buf);
  const n = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n))) as Record<string, unknown>;
  const tensors = new Map<string, BinTensor>();
  let meta: Record<string, string> = {};
  for (const [name, entry] of Object.entries(header)) {
    if (name === "__metadata__") {
      meta = entry as Record<string, string>;
      continue;
    }
    const e = entry as { dtype: string; shape: number[]; data_offsets: [number, number] };
    assert(e.dtype === "F32", `${name}: dtype ${e.dtype}, want F32`);
    const [b, end] = e.data_offsets;
    tensors.set(name, { dtype: e.dtype, shape: e.shape, values: new Float32Array(buf.slice(8 + n + b, 8 + n + end)) });
  }
  return { tensors, meta };
}

/** A .npy file (format 1.0) of little-endian float32. */
export function readNpy(buf: ArrayBuffer): BinTensor {
  const bytes = new Uint8Array(buf);
  assert(bytes[0] === 0x93 && new TextDecoder().decode(bytes.subarray(1, 6)) === "NUMPY", "not a .npy file");
  assert(bytes[6] === 1 && bytes[7] === 0, `.npy version ${bytes[6]}.${bytes[7]}, want 1.0`);
  const hlen = new DataView(buf).getUint16(8, true);
  const header = new TextDecoder().decode(bytes.subarray(10, 10 + hlen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  assert(descr === "<f4" && shape !== undefined && /'fortran_order':\s*False/.test(header), `.npy header ${header}`);
  return {
    dtype: "F32",
    shape: shape.split(",").filter((s) => s.trim()).map(Number),
    values: new Float32Array(buf.slice(10 + hlen)),
  };
}

/** A PNG file: its signature, then an IHDR chunk of a non-empty image. */
export function checkPng(buf: ArrayBuffer): void {
  const b = new Uint8Array(buf), sig = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  assert(sig.every((x, i) => b[i] === x), "not a PNG file");
  assert(new TextDecoder().decode(b.subarray(12, 16)) === "IHDR", "PNG without IHDR first");
  const view = new DataView(buf);
  assert(view.getUint32(16) > 0 && view.getUint32(20) > 0, "PNG of no pixels");
}

/** /v1/analysis, kind bias (docs/methods.md#analysis): ALiBi's slopes
 * 2^(-8(h+1)/H), the reach ln(10)/m and ln(100)/m, the bias -m*r of a key r
 * before the query. */
export function alibiAnalysis(heads: number, n: number): { slopes: number[]; reach10: number[]; reach100: number[]; bias: number[] } {
  const slopes = Array.from({ length: heads }, (_, h) => 2 ** (-8 * (h + 1) / heads));
  return {
    slopes,
    reach10: slopes.map((m) => Math.log(10) / m),
    reach100: slopes.map((m) => Math.log(100) / m),
    bias: slopes.flatMap((m) => Array.from({ length: n }, (_, r) => -m * r)),
  };
}

/** /v1/analysis, kind rope, unscaled: wavelengths 2*pi/theta_k, turns
 * within the trained length, and "seen": only the pairs whose wavelength
 * fits in the trained length have seen every angle of a longer context. */
export function ropeAnalysis(headDim: number, trained: number): { wavelength: number[]; turns: number[]; seen: number[] } {
  const wavelength = invFreq(headDim).map((f) => (2 * Math.PI) / f);
  return {
    wavelength,
    turns: wavelength.map((w) => trained / w),
    seen: wavelength.map((w) => (w <= trained ? 1 : 0)),
  };
}

// ------------------------------------------------------------ the requests

/** The requests both programs send, with what the answers must hold. */
export const req = {
  binary: { method: "binary", positions: [0, 1, 5], dim: 4 },
  sinusoidal: { method: "sinusoidal", positions: 4, dim: 8 },
  ropeTables: { head_dim: 8, positions: 4 },
  ropeApply: { head_dim: 8, positions: [1, 7], q: [[1, 2, 3, 4, 5, 6, 7, 8], [-1, 0.5, 2, 0, 1, 1, -3, 4]] },
  alibi: { method: "alibi", num_heads: 4, q_len: 4, causal: true },
  kerple: { method: "kerple", variant: "log", num_heads: 1, q_len: 5, r1: [2.0], r2: [0.5], causal: true },
  analysisAlibi: { kind: "bias", method: "alibi", num_heads: 4, seq_len: 6 },
  analysisRope: { kind: "rope", seq_len: 64, head_dim: 8, max_position_embeddings: 16, points: 4 },
  analysisPreset: { kind: "extend", model: "llama-2-7b", seq_len: 16384, points: 4 },
  attention: {
    q: [[1, 0], [0, 1]],
    k: [[1, 0], [0, 1], [0.5, -1]],
    v: [[1, 2], [3, 4], [-2, 0.5]],
    causal: true,
    return: ["output", "lse", "weights"],
  },
} as const;

/** Mutable deep copies (the generated request types have mutable arrays). */
export function copy<T>(x: T): Mutable<T> {
  return structuredClone(x) as Mutable<T>;
}

export type Mutable<T> = T extends readonly (infer U)[]
  ? Mutable<U>[]
  : T extends object
    ? { -readonly [K in keyof T]: Mutable<T[K]> }
    : T;

/** The numbers every answer to `req` must hold, from the references above. */
export const want = {
  binary: binaryEncoding([0, 1, 5], 4),
  sinusoidal: sinusoidal(4, 8),
  invFreq: invFreq(8),
  cos: ropeTable(Math.cos, [0, 1, 2, 3], 8),
  sin: ropeTable(Math.sin, [0, 1, 2, 3], 8),
  ropeApply: ropeApply(copy(req.ropeApply.q), [1, 7]),
  alibi: alibiCausal(4, 4),
  kerple: kerpleLogCausal(2, 0.5, 5),
  analysisAlibi: alibiAnalysis(4, 6),
  analysisRope: ropeAnalysis(8, 16),
  attention: attentionCausal(copy(req.attention.q), copy(req.attention.k), copy(req.attention.v)),
};

/** An answer as the client parsed it: present, as checker wants, and (when
 * given) equal to what fetch itself got for the same request. */
export function verify<T>(data: T | undefined, checker: (d: T) => void, fetched?: unknown): void {
  assert(data !== undefined, "no answer");
  checker(data);
  if (fetched !== undefined) same(data, fetched, "client vs fetch");
}

/** A binary answer (asked with parseAs "arrayBuffer"): its bytes, after
 * checking its media type. */
export function bytesOf(response: Response, data: unknown, type: string): ArrayBuffer {
  assert(response.headers.get("content-type") === type,
    `content type ${response.headers.get("content-type")}, want ${type}`);
  assert(data instanceof ArrayBuffer, `binary answer is ${typeof data}`);
  return data;
}

/** POST a JSON body with fetch itself: the answer a client must reproduce. */
export async function direct(url: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<unknown> {
  const r = await fetch(url + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  assert(r.ok, `direct POST ${path}: ${r.status}`);
  return r.json();
}

export async function directText(url: string, path: string): Promise<string> {
  const r = await fetch(url + path);
  assert(r.ok, `direct GET ${path}: ${r.status}`);
  return r.text();
}

// ------------------------------------------------ checks of the JSON answers

const TOL = 4e-6;

export function checkBinary(r: { encoding?: Tensor; x?: Tensor }): void {
  same(r.encoding?.shape, [3, 4], "encoding shape");
  close(values(r.encoding, "encoding"), want.binary, 0, "encoding");
}

export function checkSinusoidal(r: { encoding?: Tensor }): void {
  same(r.encoding?.shape, [4, 8], "encoding shape");
  close(values(r.encoding, "encoding"), want.sinusoidal, TOL, "encoding");
}

export function checkRopeTables(r: { inv_freq?: Tensor; cos?: Tensor; sin?: Tensor; attention_scaling?: number }): void {
  assert(r.attention_scaling === 1, `attention_scaling ${r.attention_scaling}, want 1`);
  close(values(r.inv_freq, "inv_freq"), want.invFreq, TOL, "inv_freq");
  same(r.cos?.shape, [4, 8], "cos shape");
  close(values(r.cos, "cos"), want.cos, TOL, "cos");
  close(values(r.sin, "sin"), want.sin, TOL, "sin");
}

export function checkRopeApply(r: { q?: Tensor; cos?: Tensor }): void {
  assert(r.cos === undefined, "tables sent beside the rotated q");
  same(r.q?.shape, [2, 8], "q shape");
  close(values(r.q, "q"), want.ropeApply, TOL, "q");
}

export function checkAlibi(r: { bias?: Tensor; buckets?: Tensor }): void {
  assert(r.buckets === undefined, "buckets sent without being asked");
  same(r.bias?.shape, [4, 4, 4], "bias shape");
  close(values(r.bias, "bias"), want.alibi, TOL, "bias");
}

export function checkAnalysisAlibi(r: { slopes?: Tensor; reach_10?: Tensor; reach_100?: Tensor; bias?: Tensor }): void {
  close(values(r.slopes, "slopes"), want.analysisAlibi.slopes, 0, "slopes");
  close(values(r.reach_10, "reach_10"), want.analysisAlibi.reach10, TOL, "reach_10");
  close(values(r.reach_100, "reach_100"), want.analysisAlibi.reach100, TOL, "reach_100");
  same(r.bias?.shape, [4, 6], "bias shape");
  close(values(r.bias, "bias"), want.analysisAlibi.bias, TOL, "bias");
}

/** /v1/analysis, kind extend, from the llama-2-7b preset (head_dim 128,
 * rope_theta 10000, trained 4096): the planner to 16384, factor 4; NTK's
 * base theta * s^(d/(d-2)), linear's rope_scaling. */
export function checkAnalysisPreset(r: { trained_len?: number; factor?: number; configs?: Record<string, { rope_theta?: number; rope_scaling?: unknown }> }): void {
  assert(r.trained_len === 4096 && r.factor === 4, `trained_len ${r.trained_len}, factor ${r.factor}`);
  close([r.configs?.ntk?.rope_theta ?? NaN], [10000 * 4 ** (128 / 126)], 1e-12, "ntk rope_theta");
  same(r.configs?.linear?.rope_scaling, { rope_type: "linear", factor: 4 }, "linear rope_scaling");
}

export function checkAnalysisRope(r: { trained_len?: number; wavelength_original?: Tensor; turns_trained?: Tensor; seen?: Tensor }): void {
  assert(r.trained_len === 16, `trained_len ${r.trained_len}`);
  close(values(r.wavelength_original, "wavelength_original"), want.analysisRope.wavelength, TOL, "wavelength");
  close(values(r.turns_trained, "turns_trained"), want.analysisRope.turns, TOL, "turns_trained");
  same(values(r.seen, "seen"), want.analysisRope.seen, "seen");
}

/** The explorer page and its assets (text, whatever type a generator gave
 * them): the page names its script and style sheet, which are there. */
export function checkExplorerPage(html: unknown): void {
  assert(typeof html === "string" && html.includes("<title>attnbias explorer</title>"), "not the explorer page");
  assert(html.includes('src="/explorer.js"') && html.includes('href="/explorer.css"'), "page assets");
}

export function checkExplorerScript(js: unknown): void {
  assert(typeof js === "string" && js.includes("/v1/analysis"), "explorer.js does not call /v1/analysis");
}

export function checkExplorerStyle(css: unknown): void {
  assert(typeof css === "string" && css.includes(".charts"), "explorer.css");
}

export function checkKerple(r: { bias?: Tensor }): void {
  close(values(r.bias, "bias"), want.kerple, TOL, "bias");
}

export function checkAttention(r: { output?: Tensor; lse?: Tensor; weights?: Tensor }): void {
  same(r.output?.shape, [2, 2], "output shape");
  close(values(r.output, "output"), want.attention.output, TOL, "output");
  close(values(r.lse, "lse"), want.attention.lse, TOL, "lse");
  close(values(r.weights, "weights"), want.attention.weights, TOL, "weights");
}

/** The catalog names every compute route and the RoPE types. */
export function checkCatalog(c: { version: string; rope: { route: string; rope_types: { name: string }[] }; attention: { route: string } }): void {
  assert(/^\d+\.\d+\.\d+/.test(c.version), `version ${c.version}`);
  same([c.rope.route, c.attention.route], ["/v1/rope", "/v1/attention"], "routes");
  for (const t of ["default", "yarn", "llama3", "longrope"])
    assert(c.rope.rope_types.some((x) => x.name === t), `rope_types lacks ${t}`);
}

/** The model catalog: Llama 3.1's preset as published (rope_theta 500000,
 * llama3 scaling by 8), and rope_theta a key the server honours. */
export function checkModels(m: {
  families: { model_type: string; presets: string[] }[];
  presets: { name: string; family: string; config: { [key: string]: unknown } }[];
  keys: { key: string; class: string }[];
}): void {
  const llama = m.presets.find((p) => p.name === "llama-3.1-8b");
  assert(llama !== undefined, "no llama-3.1-8b preset");
  assert(llama.config.rope_theta === 500000, `rope_theta ${String(llama.config.rope_theta)}`);
  const scaling = llama.config.rope_scaling as { rope_type?: string; factor?: number } | undefined;
  assert(scaling?.rope_type === "llama3" && scaling.factor === 8, "llama3 scaling by 8");
  assert(m.families.some((f) => f.model_type === llama.family && f.presets.includes(llama.name)), "its family");
  assert(m.keys.some((k) => k.key === "rope_theta" && k.class === "honoured"), "rope_theta honoured");
}

/** A problem+json answer of the given status. */
export function checkProblem(p: { status: number; type: string; detail: string; error: string; field?: string } | undefined,
  status: number, field?: string): void {
  assert(p !== undefined, `no problem body for ${status}`);
  assert(p.status === status && p.type.endsWith("/" + slug(status)), `problem ${p.status} ${p.type}, want ${status}`);
  assert(p.error === p.detail && p.detail.length > 0, `detail ${p.detail} / error ${p.error}`);
  if (field !== undefined) assert(p.field === field, `field ${p.field}, want ${field}`);
}

function slug(status: number): string {
  return ({ 400: "bad-request", 401: "unauthorized", 404: "not-found", 406: "not-acceptable" } as Record<number, string>)[status] ?? "?";
}

/** The .npy answer of attention against its JSON answer, value for value. */
export function checkNpyOutput(buf: ArrayBuffer): void {
  const t = readNpy(buf);
  same(t.shape, [2, 2], ".npy shape");
  close(Array.from(t.values), want.attention.output, TOL, ".npy output");
}

/** The safetensors answer of the RoPE tables. */
export function checkSafetensorsTables(buf: ArrayBuffer, json: { cos?: Tensor; sin?: Tensor; inv_freq?: Tensor }): void {
  const { tensors, meta } = readSafetensors(buf);
  same([...tensors.keys()].sort(), ["cos", "inv_freq", "sin"], "safetensors tensors");
  assert(Number(meta["attention_scaling"]) === 1, `__metadata__ ${JSON.stringify(meta)}`);
  for (const name of ["cos", "sin", "inv_freq"] as const) {
    const t = tensors.get(name)!;
    same(t.shape, json[name]?.shape, `${name} shape`);
    sameF32(t.values, values(json[name], name), name);
  }
}
