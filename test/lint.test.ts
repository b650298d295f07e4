/**
 * The code style the project holds itself to: eslint (typescript-eslint's
 * strict rules, type-checked for lib/), prettier, and clang-format for C++;
 * and the reliability case IDs the tests cite, each defined in
 * docs/reliability.md and each tested.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

import { tempDirPrefix } from './support/netns';

const root = join(__dirname, '..', '..');
const bin = (name: string): string => join(root, 'node_modules', '.bin', name);

function check(command: string, args: readonly string[]): void {
  const result = spawnSync(command, args, {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  assert.equal(
    result.status,
    0,
    `${command} ${args.join(' ')}\n${result.stdout}\n${result.stderr}`,
  );
}

describe('lint and format', function () {
  this.timeout(300_000);

  it('eslint reports nothing', function () {
    check(bin('eslint'), ['.']);
  });

  it('prettier finds every file formatted', function () {
    check(bin('prettier'), ['--check', '.']);
  });

  it('clang-format finds every C++ file formatted', function () {
    check(process.execPath, [join(root, 'scripts', 'clang-format.mjs'), '--check']);
  });
});

/** The folders whose sources may cite a case ID, and the ones whose citations are tests. */
const CITING_FOLDERS = ['lib', 'native', 'scripts', 'test'];
const TEST_FOLDERS = ['test', 'native/tests', 'native/fuzz'];
const SOURCE = /\.(ts|mts|cts|mjs|cjs|js|cc|h|c)$/;

/** Every source file under `folder` of `base`, at any depth (build output and modules aside). */
function sourceFiles(base: string, folder: string): string[] {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(base, dir), { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory() && entry.name !== 'node_modules') walk(path);
      else if (entry.isFile() && SOURCE.test(entry.name)) files.push(path);
    }
  };
  walk(folder);
  return files.sort();
}

/** Case IDs cited in the sources under `folders` of `base` (`N5`, `S11`, `F7`…), with where. */
function citedCaseIds(base: string, folders: readonly string[]): Map<string, string> {
  const cited = new Map<string, string>();
  for (const file of folders.flatMap((folder) => sourceFiles(base, folder))) {
    const text = readFileSync(join(base, file), 'utf8');
    // As comments and test names cite them: `(N5)`, `'N3: …`, `N5-N8`, `S6/S8`, `N5,`; not
    // inside a MAC ('D6:02:E3:DF:…') or a word. A range (N5-N8) cites the IDs between its ends.
    for (const match of text.matchAll(
      /(?<![\w.:-])([NSEF][0-9]{1,2})(?=[,)/ -]|:(?![0-9A-F])|$)/gm,
    )) {
      const id = match[1] ?? '';
      if (!cited.has(id)) cited.set(id, file);
    }
    for (const [, letter, from, to] of text.matchAll(/\b([NSEF])([0-9]{1,2})-\1([0-9]{1,2})\b/g)) {
      for (let n = Number(from); n <= Number(to); n++) {
        if (!cited.has(`${letter}${n}`)) cited.set(`${letter}${n}`, file);
      }
    }
  }
  return cited;
}

/** The IDs cited under `base`'s folders that `defined` lacks, each with where it is cited. */
function undefinedCaseIds(base: string, defined: ReadonlySet<string>): string[] {
  return [...citedCaseIds(base, CITING_FOLDERS)]
    .filter(([id]) => !defined.has(id))
    .map(([id, at]) => `${id} (${at})`);
}

describe('the README and docs/ code', function () {
  this.timeout(120_000);

  it('every TypeScript block type-checks against the package as a consumer imports it', function () {
    const blocks = ['README.md', ...readdirSync(join(root, 'docs')).map((f) => join('docs', f))]
      .filter((file) => file.endsWith('.md'))
      .flatMap((file) =>
        [...readFileSync(join(root, file), 'utf8').matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map(
          (match, index) => ({
            name: `${file.replace(/\W/g, '-')}-${index}.mts`,
            code: match[1] ?? '',
          }),
        ),
      );
    assert.ok(blocks.length >= 3, `found ${blocks.length} blocks`);
    const dir = mkdtempSync(tempDirPrefix('readme'));
    try {
      // A consumer's project: the package under node_modules (this checkout, its dist/ types).
      mkdirSync(join(dir, 'node_modules'));
      symlinkSync(root, join(dir, 'node_modules', 'flannel-guard'));
      for (const block of blocks) writeFileSync(join(dir, block.name), block.code);
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            target: 'es2022',
            module: 'node16',
            moduleResolution: 'node16',
            strict: true,
            noEmit: true,
            skipLibCheck: true,
            types: ['node'],
            typeRoots: [join(root, 'node_modules', '@types')],
          },
          files: blocks.map((block) => block.name),
        }),
      );
      check(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('reliability case IDs (docs/reliability.md)', function () {
  const doc = readFileSync(join(root, 'docs', 'reliability.md'), 'utf8');
  const defined = new Set([...doc.matchAll(/^\| ([NSEF][0-9]{1,2}) \|/gm)].map((m) => m[1] ?? ''));

  it('every ID cited in lib/, native/, scripts/ or test/ (any depth) is defined there', function () {
    assert.deepEqual(undefinedCaseIds(root, defined), []);
  });

  it('an undefined ID planted deep in native/ is caught', function () {
    // Spelt in two parts, so that this file does not cite it itself.
    const planted = ['N', '99'].join('');
    const scratch = mkdtempSync(tempDirPrefix('case-ids'));
    try {
      for (const folder of CITING_FOLDERS) mkdirSync(join(scratch, folder));
      mkdirSync(join(scratch, 'native', 'tests'));
      writeFileSync(
        join(scratch, 'native', 'tests', 'planted_test.cc'),
        `// ${planted} a case nobody wrote\n`,
      );
      writeFileSync(join(scratch, 'lib', 'cited.ts'), '// N5 and S6/S8 are defined\n');
      assert.deepEqual(undefinedCaseIds(scratch, defined), [
        `${planted} (native/tests/planted_test.cc)`,
      ]);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it('every ID defined there is cited by a test (mocha, or the native tests and fuzzers)', function () {
    const cited = citedCaseIds(root, TEST_FOLDERS);
    assert.deepEqual(
      [...defined].filter((id) => !cited.has(id)),
      [],
    );
  });
});
