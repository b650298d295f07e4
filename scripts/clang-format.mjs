#!/usr/bin/env node
// Formats the C and C++ sources of native/ with clang-format (repo .clang-format); --check only reports.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'corpus' ? [] : sources(path);
    return /\.(cc|c|h)$/.test(entry.name) ? [path] : [];
  });
}

const check = process.argv.includes('--check');
const files = sources('native');
const result = spawnSync(
  'clang-format',
  [check ? '--dry-run' : '-i', ...(check ? ['--Werror'] : []), ...files],
  {
    stdio: 'inherit',
  },
);
process.exit(result.status ?? 1);
