/**
 * What a prebuilt addon needs from the system that loads it, read off the ELF
 * file (readelf reads every architecture), and a loader probe: a small program
 * that dlopen()s the addon with every symbol bound at once (RTLD_NOW) under a
 * given C library's own dynamic linker. It defines the N-API and libuv
 * functions the addon imports (Node's part, never called), so what is left to
 * resolve is exactly what the C library must provide.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(__dirname, '..', '..', '..');

/** zig, as scripts/prebuild.mjs uses it (scripts/zig.mjs fetches it), with the same cache. */
export function zigBinary(): string {
  const found = spawnSync(process.execPath, [join(root, 'scripts', 'zig.mjs')], {
    encoding: 'utf8',
    timeout: 600_000,
  });
  if (found.status !== 0) throw new Error(`scripts/zig.mjs: ${found.stderr}`);
  return found.stdout.trim();
}
export const zigEnv = {
  ...process.env,
  ZIG_GLOBAL_CACHE_DIR: join(root, 'build', 'zig-cache'),
  ZIG_LOCAL_CACHE_DIR: join(root, 'build', 'zig-cache'),
};

export interface ElfImports {
  /** DT_NEEDED: the libraries it names. */
  needed: string[];
  /** Version needs: GLIBC_2.17, GLIBCXX_3.4.30… */
  versions: string[];
  /** Undefined symbols that must be found (weak ones may stay unresolved), with their version. */
  undefinedSymbols: { name: string; version: string | undefined }[];
}

function readelf(args: string[], file: string): string {
  const out = spawnSync('readelf', ['-W', ...args, file], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`readelf ${args.join(' ')} ${file}: ${out.stderr}`);
  return out.stdout;
}

export function elfImports(file: string): ElfImports {
  const needed = [...readelf(['-d'], file).matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)]
    .map((m) => m[1] ?? '')
    .sort();
  const versionSection = readelf(['-V'], file).split(/Version needs section/)[1] ?? '';
  const versions = [...versionSection.matchAll(/Name: (\S+)\s+Flags/g)].map((m) => m[1] ?? '');
  const undefinedSymbols: ElfImports['undefinedSymbols'] = [];
  for (const line of readelf(['--dyn-syms'], file).split('\n')) {
    // Num: Value Size Type Bind Vis Ndx Name[@VERSION (n)]
    const fields = line.trim().split(/\s+/);
    if (fields[6] !== 'UND' || fields[4] === 'WEAK' || !fields[7]) continue;
    const [name = '', version] = fields[7].split(/@+/);
    undefinedSymbols.push({ name, version });
  }
  return { needed, versions, undefinedSymbols };
}

/** What Node itself provides to an addon. */
export const fromNode = (name: string): boolean => /^(napi_|node_api_|uv_)/.test(name);

/** [major, minor] of GLIBC_x.y[.z]. */
export function glibcVersion(version: string): [number, number] | undefined {
  const m = /^GLIBC_(\d+)\.(\d+)/.exec(version);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** The symbols a shared library (a C library) defines for others. */
export function definedSymbols(file: string): Set<string> {
  const names = new Set<string>();
  for (const line of readelf(['--dyn-syms'], file).split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields[6] && fields[6] !== 'UND' && fields[6] !== 'Ndx' && fields[7]) {
      names.add(fields[7].split('@')[0] ?? '');
    }
  }
  return names;
}

/**
 * Writes DIR/probe.c: a program that dlopen()s argv[1] with RTLD_NOW and prints "loaded" when its
 * N-API entry point is there, after defining the Node-provided functions the ADDONS import.
 * Compile it with -rdynamic, so that an addon binds to them.
 */
export function writeLoaderProbe(dir: string, addons: string[]): string {
  const imported = addons.flatMap((addon) => elfImports(addon).undefinedSymbols);
  const nodeSide = [...new Set(imported.map((s) => s.name))]
    .filter(fromNode)
    .sort()
    .map((name) => `void ${name}(void) { abort(); }`);
  const source = join(dir, 'probe.c');
  writeFileSync(
    source,
    [
      '#include <dlfcn.h>',
      '#include <stdio.h>',
      '#include <stdlib.h>',
      ...nodeSide,
      'int main(int argc, char** argv) {',
      '  if (argc != 2) return 2;',
      '  void* addon = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);',
      '  if (addon == NULL) { fprintf(stderr, "%s\\n", dlerror()); return 1; }',
      '  puts(dlsym(addon, "napi_register_module_v1") ? "loaded" : "no entry point");',
      '  return 0;',
      '}',
      '',
    ].join('\n'),
  );
  return source;
}
