#!/usr/bin/env node
// Compiles the TypeScript into dist/ (from scratch unless --incremental) and
// makes the package's bins executable: tsc does not, and `npx flannel-guard`
// from a checkout runs dist/lib/cli/main.js through its interpreter line.
import { spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
if (!process.argv.includes('--incremental'))
  rmSync(join(root, 'dist'), { recursive: true, force: true });
const tsc = spawnSync(
  process.execPath,
  [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(root, 'tsconfig.json')],
  {
    stdio: 'inherit',
  },
);
if (tsc.status !== 0) process.exit(tsc.status ?? 1);
const { bin } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
for (const file of Object.values(bin)) chmodSync(join(root, file), 0o755);
