#!/usr/bin/env node
// Puts the addon built in build/Release where node-gyp-build looks for a
// prebuilt binary: prebuilds/<platform>-<arch>/node.napi.glibc.node (N-API,
// so one file serves every Node version from 20 on). Run before `npm pack`
// (the package's prepack does); the tarball then installs without a compiler.
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const built = join(root, 'build', 'Release', 'flannel_guard.node');
if (!existsSync(built)) {
  console.error(
    `prebuild: ${built} is missing: build the addon first (npm ci, or npx node-gyp rebuild)`,
  );
  process.exit(1);
}
const target = join(
  root,
  'prebuilds',
  `${process.platform}-${process.arch}`,
  'node.napi.glibc.node',
);
mkdirSync(dirname(target), { recursive: true });
copyFileSync(built, target);
console.log(`prebuild: ${target}`);
