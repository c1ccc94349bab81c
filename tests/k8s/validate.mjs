// validate.mjs: every Kubernetes object of docker/kubernetes/ checked
// against the Kubernetes API schemas, offline.
//
//   node tests/k8s/validate.mjs docker/kubernetes   the kustomization's resources,
//                                                   the Secrets its secretGenerator
//                                                   makes, and each commented
//                                                   "# NAME variant:" block
//   node tests/k8s/validate.mjs -                   a YAML stream on stdin
//                                                   (`kubectl kustomize` output)
//
// Two checks per object:
//  - the schema: kubernetes-models' validators, compiled from the OpenAPI
//    definitions of the Kubernetes API (types, required fields, enums,
//    formats);
//  - no unknown field: the API server drops (or, strict, refuses) a field
//    it does not know, so a misspelt `readinesProbe` would silently mean no
//    probe.  The schemas allow any extra field; the models' type
//    declarations list each object's fields, and every key is looked up
//    there, level by level.
// Prints "ok KIND/NAME" or "FAIL KIND/NAME: why" per object, then
// "N passed, N failed"; exits 1 when any failed.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MODELS = path.join(HERE, "node_modules", "kubernetes-models");
const NODE_MODULES = path.join(HERE, "node_modules");

// ---- the model of an apiVersion/kind -------------------------------------

function modelDir(apiVersion) {
  // "v1" -> v1/, "apps/v1" -> apps/v1/
  return path.join(MODELS, ...apiVersion.split("/"));
}

async function modelClass(apiVersion, kind) {
  const file = path.join(modelDir(apiVersion), kind + ".mjs");
  if (!fs.existsSync(file)) return null;
  const mod = await import(file);
  return mod[kind] || null;
}

// ---- fields from the type declarations -----------------------------------

const ifaceCache = new Map();

// The interface declared first in a .d.ts file: its fields and their types,
// and where each imported type is declared; null for a file that declares a
// type alias instead (IntOrString, Quantity, ...).  A file that is missing
// is an error: the check must not thin out unnoticed.
function loadInterface(file) {
  if (ifaceCache.has(file)) return ifaceCache.get(file);
  if (!fs.existsSync(file)) throw new Error(`no type declarations at ${file}`);
  let out = null;
  {
    const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    const imports = new Map();
    for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
      const spec = m[2];
      const target = spec.startsWith(".")
        ? path.resolve(path.dirname(file), spec + ".d.ts")
        : path.join(NODE_MODULES, spec + ".d.ts");
      for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean))
        imports.set(name.split(/\s+as\s+/).pop(), target);
    }
    const body = text.match(/export\s+interface\s+\w+[^{]*\{([\s\S]*?)\n\}/);
    if (body) {
      // One field per `"name"?: type;` at the interface's own level; a type
      // may span lines (an inline map `{ [key: string]: string; }`).
      const fields = new Map();
      let name = null, type = "", depth = 0;
      for (const line of body[1].split("\n")) {
        const m = depth === 0 && line.match(/^\s*"([^"]+)"\??:\s*(.*)$/);
        if (m) {
          name = m[1];
          type = "";
        }
        if (name === null) continue;
        const part = m ? m[2] : line.trim();
        type += (type ? " " : "") + part;
        depth += (part.match(/\{/g) || []).length - (part.match(/\}/g) || []).length;
        if (depth === 0 && part.endsWith(";")) {
          fields.set(name, type.replace(/;$/, "").trim());
          name = null;
        }
      }
      out = { fields, imports };
    }
  }
  ifaceCache.set(file, out);
  return out;
}

function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

// Unknown keys of value (declared by the interface of `file`), as JSON
// pointers.
function unknownFields(value, file, where, out) {
  const iface = loadInterface(file);
  if (!iface || !isPlainObject(value)) return out;
  for (const [key, v] of Object.entries(value)) {
    const type = iface.fields.get(key);
    if (type === undefined) {
      out.push(`${where}/${key}`);
      continue;
    }
    const arr = type.match(/^Array<(\w+)>$/);
    const one = type.match(/^(\w+)$/);
    const ref = (arr || one) && iface.imports.get((arr || one)[1]);
    if (!ref) continue; // a scalar, a map, or a type alias
    if (arr && Array.isArray(v)) v.forEach((x, i) => unknownFields(x, ref, `${where}/${key}/${i}`, out));
    else if (one) unknownFields(v, ref, `${where}/${key}`, out);
  }
  return out;
}

// ---- one object ----------------------------------------------------------

// Base64 of Secret data and ConfigMap binaryData as the API server reads
// it: its decoder skips line breaks, which kustomize puts every 76
// characters (the schema's "byte" format does not allow them).
function unwrapBase64(obj) {
  const field = obj.kind === "Secret" ? "data" : obj.kind === "ConfigMap" ? "binaryData" : null;
  if (!field || !isPlainObject(obj[field])) return obj;
  const data = Object.fromEntries(Object.entries(obj[field]).map(
    ([k, v]) => [k, typeof v === "string" ? v.replace(/[\r\n]/g, "") : v]));
  return { ...obj, [field]: data };
}

async function check(obj, origin) {
  const kind = obj && obj.kind;
  const name = `${kind || "?"}/${(obj && obj.metadata && obj.metadata.name) || "?"}`;
  if (!isPlainObject(obj) || typeof obj.apiVersion !== "string" || typeof kind !== "string")
    return [name, [`${origin}: not a Kubernetes object (apiVersion and kind)`]];
  const Model = await modelClass(obj.apiVersion, kind);
  if (!Model) return [name, [`${origin}: no ${obj.apiVersion} ${kind} in the Kubernetes API`]];
  const errors = [];
  try {
    new Model(unwrapBase64(obj)).validate();
  } catch (e) {
    const details = e.details || e.errors || [];
    if (details.length)
      for (const d of details) errors.push(`${d.instancePath || "/"} ${d.message}`);
    else errors.push(String(e.message || e));
  }
  const declared = path.join(modelDir(obj.apiVersion), kind + ".d.ts");
  if (!loadInterface(declared) || !loadInterface(declared).fields.has("spec") &&
      !loadInterface(declared).fields.has("data"))
    errors.push(`cannot read the fields of ${obj.apiVersion} ${kind} from ${declared}`);
  for (const f of unknownFields(obj, declared, "", []))
    errors.push(`${f}: no such field in ${obj.apiVersion} ${kind}`);
  return [name, errors];
}

// ---- where the objects come from -----------------------------------------

function documents(text, origin) {
  const out = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length) throw new Error(`${origin}: ${doc.errors[0].message}`);
    const v = doc.toJS();
    if (v !== null && v !== undefined) out.push([v, origin]);
  }
  return out;
}

// The commented blocks that start with a line "# NAME variant:": the lines
// after it, "#" and one space removed, merged into the file's first object
// (the block's top-level keys replace the object's spec keys).
function variants(text, origin) {
  const out = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i].match(/^# ([\w-]+) variant:\s*$/);
    if (!m) continue;
    const block = [];
    for (let j = i + 1; j < lines.length && /^#( |$)/.test(lines[j]); j++)
      block.push(lines[j].replace(/^# ?/, ""));
    const base = documents(text, origin)[0][0];
    const patch = documents(block.join("\n"), `${origin} (${m[1]} variant)`)[0][0];
    out.push([{ ...base, spec: { ...base.spec, ...patch } }, `${origin} (${m[1]} variant)`]);
  }
  return out;
}

function fromKustomization(dir) {
  const kfile = path.join(dir, "kustomization.yaml");
  const k = documents(fs.readFileSync(kfile, "utf8"), kfile)[0][0];
  const objs = [[k, kfile, "kustomization"]];
  for (const res of k.resources || []) {
    const file = path.join(dir, res);
    const text = fs.readFileSync(file, "utf8");
    objs.push(...documents(text, file), ...variants(text, file));
  }
  // The Secrets kustomize generates: their type and keys (their data are
  // yours; placeholders stand in for them here).
  for (const g of k.secretGenerator || []) {
    const data = {};
    for (const f of g.files || []) data[f.split("=")[0]] = Buffer.from("placeholder").toString("base64");
    objs.push([{ apiVersion: "v1", kind: "Secret", metadata: { name: g.name }, type: g.type || "Opaque", data },
               `${kfile} secretGenerator`]);
  }
  return objs;
}

// The kustomization file's own fields: those every kustomize version knows.
const KUSTOMIZE_FIELDS = new Set(["apiVersion", "kind", "resources", "images", "secretGenerator",
  "configMapGenerator", "generatorOptions", "namespace", "namePrefix", "nameSuffix"]);

function checkKustomization(k) {
  const errors = [];
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization")
    errors.push("not a kustomize.config.k8s.io/v1beta1 Kustomization");
  for (const key of Object.keys(k))
    if (!KUSTOMIZE_FIELDS.has(key)) errors.push(`/${key}: not a field every kustomize version knows`);
  return ["Kustomization/kustomization.yaml", errors];
}

async function main(args) {
  if (args.length !== 1) {
    console.error("usage: node validate.mjs DIR | -");
    return 2;
  }
  const objs = args[0] === "-" ? documents(fs.readFileSync(0, "utf8"), "stdin") : fromKustomization(args[0]);
  let passed = 0, failed = 0;
  for (const [obj, origin, what] of objs) {
    const [name, errors] = what === "kustomization" ? checkKustomization(obj) : await check(obj, origin);
    if (errors.length) {
      failed++;
      console.log(`FAIL ${name} (${path.relative(process.cwd(), origin) || origin}): ${errors.join("; ")}`);
    } else {
      passed++;
      console.log(`ok   ${name} (${path.relative(process.cwd(), origin) || origin})`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
