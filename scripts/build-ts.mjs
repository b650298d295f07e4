#!/usr/bin/env node
// Compiles the TypeScript into dist/ and makes the package's bins executable (tsc does not,
// and `npx flannel-guard` from a checkout runs dist/lib/cli/main.js through its interpreter
// line).
//
//   (no flag)       a clean build into a folder of its own, then swapped in for dist/: an
//                   interrupted build (Ctrl-C, `timeout`, SIGKILL) leaves the old dist/ whole,
//                   never none, so a command running meanwhile still finds its files;
//   --if-stale      the same, unless dist/ was built from these very sources (what `prepare`
//                   runs: every `npm install` of a project that links the checkout runs it, and
//                   then it costs nothing). Under `npx`/`npm exec` it never builds (a stale
//                   dist/ is said on stderr instead);
//   --incremental   tsc over dist/ in place (development: the tests and benchmarks).
//
// Progress goes to stderr (`npm pack --json` prints lifecycle scripts' stdout into its JSON).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const STAMP = '.build-stamp';
const SOURCE_DIRS = ['lib', 'test', 'scripts'];
const incremental = process.argv.includes('--incremental');
const ifStale = process.argv.includes('--if-stale');

/** What dist/ is built from: the compiler's version, its configuration, every .ts file's size and time. */
function sourceStamp() {
  const hash = createHash('sha256');
  hash.update(readFileSync(join(root, 'node_modules', 'typescript', 'package.json')));
  hash.update(readFileSync(join(root, 'tsconfig.json')));
  hash.update(readFileSync(join(root, 'package.json')));
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
      a.name < b.name ? -1 : 1,
    )) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) {
        const { size, mtimeMs } = statSync(path);
        hash.update(`${relative(root, path)} ${size} ${mtimeMs}\n`);
      }
    }
  };
  // A tree may hold only some of them (the image's build stage copies lib/ alone).
  for (const dir of SOURCE_DIRS) if (existsSync(join(root, dir))) walk(join(root, dir));
  return hash.digest('hex');
}

const { bin } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

function compile(outDir) {
  const tsc = spawnSync(
    process.execPath,
    [
      join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
      ...['-p', join(root, 'tsconfig.json'), '--outDir', outDir],
    ],
    // tsc prints its diagnostics on stdout: to stderr with the rest of the progress.
    { stdio: ['ignore', 2, 2] },
  );
  if (tsc.status !== 0) return false;
  for (const file of Object.values(bin)) {
    chmodSync(join(outDir, relative('dist', file)), 0o755);
  }
  return true;
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === 'EPERM';
  }
}

/** Folders left by builds that were killed. */
function removeAbandoned() {
  for (const name of readdirSync(root)) {
    const match = /^dist\.(?:building|old)-(\d+)$/.exec(name);
    if (match && !pidAlive(Number(match[1]))) {
      rmSync(join(root, name), { recursive: true, force: true });
    }
  }
}

if (incremental) {
  if (!compile(dist)) process.exit(1);
  process.exit(0);
}
const stamp = sourceStamp();
const fresh = existsSync(join(dist, STAMP)) && readFileSync(join(dist, STAMP), 'utf8') === stamp;
if (ifStale && fresh) process.exit(0);
if (ifStale && process.env.npm_command === 'exec') {
  process.stderr.write(
    `flannel-guard: dist/ is ${existsSync(dist) ? 'older than the sources' : 'not built'}; run npm run build:ts in ${root}\n`,
  );
  process.exit(0);
}
removeAbandoned();
const building = join(root, `dist.building-${process.pid}`);
const old = join(root, `dist.old-${process.pid}`);
process.stderr.write('flannel-guard: compiling the TypeScript into dist/\n');
if (!compile(building)) {
  rmSync(building, { recursive: true, force: true });
  process.exit(1);
}
writeFileSync(join(building, STAMP), stamp);
// Two renames: dist/ is missing only between them, never while tsc runs.
if (existsSync(dist)) renameSync(dist, old);
renameSync(building, dist);
rmSync(old, { recursive: true, force: true });
