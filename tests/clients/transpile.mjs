// transpile.mjs: the TypeScript of tsconfig.json's files as JavaScript
// modules in its outDir, file by file and without type-checking: what
// `tsc` would emit, in a fraction of its time (test_clients.py has run
// `tsc --noEmit` on the same files first).
//   node transpile.mjs

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = dirname(fileURLToPath(import.meta.url));
const config = ts.getParsedCommandLineOfConfigFile(join(here, "tsconfig.json"), {}, {
  ...ts.sys,
  onUnRecoverableConfigFileDiagnostic: (d) => {
    throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  },
});
if (!config) throw new Error("cannot read tsconfig.json");
const { options, fileNames } = config;
// Alone, a file cannot tell NodeNext that it is a module (package.json
// says so): ask for ES modules outright, as NodeNext emits them here.
const compilerOptions = { ...options, module: ts.ModuleKind.ESNext };

for (const file of fileNames) {
  const out = join(options.outDir, relative(options.rootDir, file)).replace(/\.ts$/, ".js");
  const { outputText } = ts.transpileModule(readFileSync(file, "utf8"), { compilerOptions, fileName: file });
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, outputText);
}
console.log(`${fileNames.length} files into ${relative(here, options.outDir)}/`);
