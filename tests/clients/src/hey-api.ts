// hey-api.ts: every route of attnbiasd through the SDK @hey-api/openapi-ts
// generates from api/openapi.yaml (generated/hey-api/: one function per
// operationId, its own fetch client).  Each answer is checked against
// float64 references (lib.ts) and against what fetch itself gets for the
// same request.
//   node dist/src/hey-api.js URL KEYED_URL KEY

import { createClient, createConfig } from "../generated/hey-api/client/index.js";
import { client } from "../generated/hey-api/client.gen.js";
import * as sdk from "../generated/hey-api/sdk.gen.js";
import * as lib from "./lib.js";
import { assert, check, copy, req } from "./lib.js";

const { url, keyedUrl, key } = lib.parseArgs();
client.setConfig({ baseUrl: url });

await check("healthz", async () => {
  const { data } = await sdk.healthz();
  lib.same(data, { status: "ok" }, "healthz");
});

await check("readyz", async () => {
  const { data } = await sdk.readyz();
  assert(data?.status === "ok", `readyz ${JSON.stringify(data)}`);
});

await check("metrics", async () => {
  const { data } = await sdk.metrics();
  assert(typeof data === "string" && data.includes("# TYPE attnbias_requests_total counter"), "metrics text");
});

await check("openapi", async () => {
  const { data } = await sdk.openapi({ parseAs: "text" });
  assert(data === (await lib.directText(url, "/openapi.yaml")), "document");
});

await check("methods", async () => {
  const { data } = await sdk.methods();
  assert(data !== undefined, "no catalog");
  lib.checkCatalog(data);
  assert(data.attention.bias.parameters.some((p) => p.name === "method"), "attention bias parameters");
});

await check("models", async () => {
  const { data } = await sdk.models();
  assert(data !== undefined, "no catalog");
  lib.checkModels(data);
  lib.same(data, JSON.parse(await lib.directText(url, "/v1/models")), "client vs fetch");
});

await check("encodings (binary)", async () => {
  const body = copy(req.binary);
  const { data } = await sdk.encodings({ body });
  lib.verify(data, lib.checkBinary, await lib.direct(url, "/v1/encodings", body));
});

await check("encodings (sinusoidal)", async () => {
  lib.verify((await sdk.encodings({ body: copy(req.sinusoidal) })).data, lib.checkSinusoidal);
});

await check("rope (tables)", async () => {
  const body = copy(req.ropeTables);
  const { data } = await sdk.rope({ body });
  lib.verify(data, lib.checkRopeTables, await lib.direct(url, "/v1/rope", body));
});

await check("rope (q rotated)", async () => {
  lib.verify((await sdk.rope({ body: copy(req.ropeApply) })).data, lib.checkRopeApply);
});

// The SDK types `data` by the JSON answer whatever parseAs says: a binary
// answer (parseAs "arrayBuffer") is an ArrayBuffer all the same (bytesOf).
await check("rope (safetensors answer)", async () => {
  const body = copy(req.ropeTables);
  const type = "application/vnd.safetensors";
  const { data, response } = await sdk.rope({ body, headers: { Accept: type }, parseAs: "arrayBuffer" });
  const json = (await lib.direct(url, "/v1/rope", body)) as lib.Tensors;
  lib.checkSafetensorsTables(lib.bytesOf(response, data, type), json);
});

await check("bias (alibi)", async () => {
  const body = copy(req.alibi);
  const { data } = await sdk.bias({ body });
  lib.verify(data, lib.checkAlibi, await lib.direct(url, "/v1/bias", body));
});

await check("bias (kerple)", async () => {
  lib.verify((await sdk.bias({ body: copy(req.kerple) })).data, lib.checkKerple);
});

await check("bias (PNG answer)", async () => {
  const type = "image/png";
  const { data, response } = await sdk.bias({ body: copy(req.alibi), headers: { Accept: type }, parseAs: "arrayBuffer" });
  lib.checkPng(lib.bytesOf(response, data, type));
});

await check("attention", async () => {
  const body = copy(req.attention);
  const { data } = await sdk.attention({ body });
  lib.verify(data, lib.checkAttention, await lib.direct(url, "/v1/attention", body));
});

await check("attention (.npy answer)", async () => {
  const type = "application/x-npy";
  const body = { ...copy(req.attention), return: ["output" as const] };
  const { data, response } = await sdk.attention({ body, headers: { Accept: type }, parseAs: "arrayBuffer" });
  lib.checkNpyOutput(lib.bytesOf(response, data, type));
});

await check("analysis (bias)", async () => {
  const body = copy(req.analysisAlibi);
  const { data } = await sdk.analysis({ body });
  lib.verify(data, lib.checkAnalysisAlibi, await lib.direct(url, "/v1/analysis", body));
});

await check("analysis (rope)", async () => {
  lib.verify((await sdk.analysis({ body: copy(req.analysisRope) })).data, lib.checkAnalysisRope);
});

await check("analysis (a preset's config)", async () => {
  lib.verify((await sdk.analysis({ body: copy(req.analysisPreset) })).data, lib.checkAnalysisPreset);
});

await check("explorer", async () => {
  lib.checkExplorerPage((await sdk.explorer({ parseAs: "text" })).data);
});

await check("explorerScript", async () => {
  lib.checkExplorerScript((await sdk.explorerScript({ parseAs: "text" })).data);
});

await check("explorerStyle", async () => {
  lib.checkExplorerStyle((await sdk.explorerStyle({ parseAs: "text" })).data);
});

await check("400 names the field", async () => {
  const { data, error, response } = await sdk.rope({ body: { head_dim: 8, rotary_dim: 7, positions: 4 } });
  assert(data === undefined && response.status === 400, `status ${response.status}`);
  lib.checkProblem(error, 400, "/rotary_dim");
});

await check("406 for an Accept the route cannot meet", async () => {
  const { error, response } = await sdk.rope({ body: copy(req.ropeTables), headers: { Accept: "image/png" } });
  assert(response.status === 406, `status ${response.status}`);
  lib.checkProblem(error, 406);
});

await check("404 from a wrong base URL", async () => {
  const wrong = createClient(createConfig({ baseUrl: url + "/api" }));
  const { error, response } = await sdk.healthz({ client: wrong });
  assert(response.status === 404, `status ${response.status}`);
  lib.checkProblem(error, 404);
});

await check("API key: 401 without, 200 with (the document's bearerAuth)", async () => {
  const anon = createClient(createConfig({ baseUrl: keyedUrl }));
  const denied = await sdk.methods({ client: anon });
  assert(denied.response.status === 401, `status ${denied.response.status}`);
  lib.checkProblem(denied.error, 401);
  assert((await sdk.healthz({ client: anon })).data?.status === "ok", "/healthz needs no key");
  // `auth` answers the operation's security scheme: Authorization: Bearer KEY.
  const keyed = createClient(createConfig({ baseUrl: keyedUrl, auth: key }));
  const { data } = await sdk.encodings({ client: keyed, body: copy(req.binary) });
  assert(data !== undefined, "no answer with the key");
  lib.checkBinary(data);
});

lib.finish();
