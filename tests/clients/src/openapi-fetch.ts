// openapi-fetch.ts: every route of attnbiasd through openapi-fetch, typed by
// openapi-typescript's output for api/openapi.yaml (generated/openapi-typescript/).
// Each answer is checked against float64 references (lib.ts) and against
// what fetch itself gets for the same request.
//   node dist/src/openapi-fetch.js URL KEYED_URL KEY

import createClient from "openapi-fetch";
import type { paths } from "../generated/openapi-typescript/schema.js";
import * as lib from "./lib.js";
import { assert, check, copy, req } from "./lib.js";

const { url, keyedUrl, key } = lib.parseArgs();
// The JSON media types of the answers (2xx and problem+json): binary
// answers are asked for with parseAs, and typed by it.
type JsonMedia = "application/json" | "application/problem+json";
const api = createClient<paths, JsonMedia>({ baseUrl: url });

await check("GET /healthz", async () => {
  const { data } = await api.GET("/healthz");
  lib.same(data, { status: "ok" }, "healthz");
});

await check("GET /readyz", async () => {
  const { data } = await api.GET("/readyz");
  assert(data?.status === "ok", `readyz ${JSON.stringify(data)}`);
});

await check("GET /metrics", async () => {
  const { data, response } = await api.GET("/metrics", { parseAs: "text" });
  assert(response.headers.get("content-type")?.startsWith("text/plain"), "metrics content type");
  assert(data?.includes("# TYPE attnbias_requests_total counter"), "metrics text");
});

await check("GET /openapi.yaml", async () => {
  const { data } = await api.GET("/openapi.yaml", { parseAs: "text" });
  assert(data !== undefined && data === (await lib.directText(url, "/openapi.yaml")), "document");
  assert(data.includes("\nopenapi: 3.1."), "not the OpenAPI document");
});

await check("GET /v1/methods", async () => {
  const { data } = await api.GET("/v1/methods");
  assert(data !== undefined, "no catalog");
  lib.checkCatalog(data);
  // Every parameter has the members the schema requires.
  for (const p of data.rope.parameters) assert(typeof p.required === "boolean" && p.description, p.name);
});

await check("GET /v1/models", async () => {
  const { data } = await api.GET("/v1/models");
  assert(data !== undefined, "no catalog");
  lib.checkModels(data);
  lib.same(data, JSON.parse(await lib.directText(url, "/v1/models")), "client vs fetch");
});

await check("POST /v1/encodings (binary)", async () => {
  const body = copy(req.binary);
  const { data } = await api.POST("/v1/encodings", { body });
  lib.verify(data, lib.checkBinary, await lib.direct(url, "/v1/encodings", body));
});

await check("POST /v1/encodings (sinusoidal)", async () => {
  lib.verify((await api.POST("/v1/encodings", { body: copy(req.sinusoidal) })).data, lib.checkSinusoidal);
});

await check("POST /v1/rope (tables)", async () => {
  const body = copy(req.ropeTables);
  const { data } = await api.POST("/v1/rope", { body });
  lib.verify(data, lib.checkRopeTables, await lib.direct(url, "/v1/rope", body));
});

await check("POST /v1/rope (q rotated)", async () => {
  lib.verify((await api.POST("/v1/rope", { body: copy(req.ropeApply) })).data, lib.checkRopeApply);
});

await check("POST /v1/rope (safetensors answer)", async () => {
  const body = copy(req.ropeTables);
  const type = "application/vnd.safetensors";
  const { data, response } = await api.POST("/v1/rope", { body, headers: { Accept: type }, parseAs: "arrayBuffer" });
  const json = (await lib.direct(url, "/v1/rope", body)) as lib.Tensors;
  lib.checkSafetensorsTables(lib.bytesOf(response, data, type), json);
});

await check("POST /v1/bias (alibi)", async () => {
  const body = copy(req.alibi);
  const { data } = await api.POST("/v1/bias", { body });
  lib.verify(data, lib.checkAlibi, await lib.direct(url, "/v1/bias", body));
});

await check("POST /v1/bias (kerple)", async () => {
  lib.verify((await api.POST("/v1/bias", { body: copy(req.kerple) })).data, lib.checkKerple);
});

await check("POST /v1/bias (PNG answer)", async () => {
  const type = "image/png";
  const { data, response } = await api.POST("/v1/bias", { body: copy(req.alibi), headers: { Accept: type }, parseAs: "arrayBuffer" });
  lib.checkPng(lib.bytesOf(response, data, type));
});

await check("POST /v1/attention", async () => {
  const body = copy(req.attention);
  const { data } = await api.POST("/v1/attention", { body });
  lib.verify(data, lib.checkAttention, await lib.direct(url, "/v1/attention", body));
});

await check("POST /v1/attention (.npy answer)", async () => {
  const type = "application/x-npy";
  const body = { ...copy(req.attention), return: ["output" as const] };
  const { data, response } = await api.POST("/v1/attention", { body, headers: { Accept: type }, parseAs: "arrayBuffer" });
  lib.checkNpyOutput(lib.bytesOf(response, data, type));
});

await check("POST /v1/analysis (bias)", async () => {
  const body = copy(req.analysisAlibi);
  const { data } = await api.POST("/v1/analysis", { body });
  lib.verify(data, lib.checkAnalysisAlibi, await lib.direct(url, "/v1/analysis", body));
});

await check("POST /v1/analysis (rope)", async () => {
  lib.verify((await api.POST("/v1/analysis", { body: copy(req.analysisRope) })).data, lib.checkAnalysisRope);
});

await check("POST /v1/analysis (a preset's config)", async () => {
  lib.verify((await api.POST("/v1/analysis", { body: copy(req.analysisPreset) })).data, lib.checkAnalysisPreset);
});

await check("POST /v1/analysis (png)", async () => {
  const type = "image/png";
  const { data, response } = await api.POST("/v1/analysis", { body: copy(req.analysisRope), headers: { Accept: type }, parseAs: "arrayBuffer" });
  lib.checkPng(lib.bytesOf(response, data, type));
});

await check("GET / (the explorer page)", async () => {
  const { data, response } = await api.GET("/", { parseAs: "text" });
  assert(response.headers.get("content-security-policy")?.includes("script-src 'self'"), "CSP");
  lib.checkExplorerPage(data);
});

await check("GET /explorer.js", async () => {
  lib.checkExplorerScript((await api.GET("/explorer.js", { parseAs: "text" })).data);
});

await check("GET /explorer.css", async () => {
  lib.checkExplorerStyle((await api.GET("/explorer.css", { parseAs: "text" })).data);
});

await check("400 names the field", async () => {
  const { data, error, response } = await api.POST("/v1/rope", { body: { head_dim: 8, rotary_dim: 7, positions: 4 } });
  assert(data === undefined && response.status === 400, `status ${response.status}`);
  lib.checkProblem(error, 400, "/rotary_dim");
});

await check("406 for an Accept the route cannot meet", async () => {
  const { error, response } = await api.POST("/v1/rope", { body: copy(req.ropeTables), headers: { Accept: "image/png" } });
  assert(response.status === 406, `status ${response.status}`);
  lib.checkProblem(error, 406);
});

await check("404 from a wrong base URL", async () => {
  const wrong = createClient<paths, JsonMedia>({ baseUrl: url + "/api" });
  const { error, response } = await wrong.GET("/healthz");
  assert(response.status === 404, `status ${response.status}`);
  lib.checkProblem(error, 404);
});

await check("API key: 401 without, 200 with", async () => {
  const anon = createClient<paths, JsonMedia>({ baseUrl: keyedUrl });
  const denied = await anon.GET("/v1/methods");
  assert(denied.response.status === 401, `status ${denied.response.status}`);
  assert(denied.response.headers.get("www-authenticate") === 'Bearer realm="attnbias"', "WWW-Authenticate");
  lib.checkProblem(denied.error, 401);
  assert((await anon.GET("/healthz")).data?.status === "ok", "/healthz needs no key");
  const keyed = createClient<paths, JsonMedia>({ baseUrl: keyedUrl, headers: { Authorization: `Bearer ${key}` } });
  const { data } = await keyed.POST("/v1/encodings", { body: copy(req.binary) });
  assert(data !== undefined, "no answer with the key");
  lib.checkBinary(data);
});

lib.finish();
