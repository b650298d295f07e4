#!/usr/bin/env node
// Builds and runs the libFuzzer targets (native/fuzz/fuzz_*.cc) for a fixed time.
//
//   node scripts/fuzz.mjs [--seconds N] [--target fuzz_netlink|fuzz_ethtool|all]
//                         [--build-dir DIR] [--jobs N] [--verbose]
//
// Configures native/ with -DFG_FUZZ=ON and clang++ (ASan+UBSan+libFuzzer), builds the
// selected targets, and runs each for N seconds (default 60) on a fresh copy of its seed
// corpus (native/fuzz/corpus/<name without fuzz_>/, when it exists); the seeds in the
// repository are never modified. Per target it prints
//
//   fuzz_netlink: 1234567 execs in 60 s (20576/s), 0 crashes
//
// from libFuzzer's final statistics (-print_final_stats=1). A crash, leak, timeout or
// out-of-memory input is kept under DIR/artifacts/<target>/ and its path is printed; the
// exit status is then 1. The full libFuzzer output is in DIR/logs/<target>.log.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, createWriteStream, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const fuzzDir = join(root, 'native', 'fuzz');

function usage(message) {
  if (message) console.error(`fuzz.mjs: ${message}`);
  console.error(
    'usage: node scripts/fuzz.mjs [--seconds N] [--target fuzz_netlink|fuzz_ethtool|all] ' +
      '[--build-dir DIR] [--jobs N] [--verbose]',
  );
  process.exit(2);
}

function parseArguments(argv) {
  const options = {
    seconds: 60,
    target: 'all',
    buildDir: join(root, 'build', 'fuzz'),
    jobs: 2,
    verbose: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i];
    const [flag, inline] = argument.startsWith('--') ? argument.split(/=(.*)/s, 2) : [argument];
    const value = () => {
      if (inline !== undefined) return inline;
      if (i + 1 >= argv.length) usage(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case '--seconds': {
        const seconds = Number(value());
        if (!Number.isInteger(seconds) || seconds < 1)
          usage('--seconds must be a positive integer');
        options.seconds = seconds;
        break;
      }
      case '--target':
        options.target = value();
        break;
      case '--build-dir':
        options.buildDir = resolve(value());
        break;
      case '--jobs': {
        const jobs = Number(value());
        if (!Number.isInteger(jobs) || jobs < 1) usage('--jobs must be a positive integer');
        options.jobs = jobs;
        break;
      }
      case '--verbose':
        options.verbose = true;
        break;
      case '--help':
      case '-h':
        usage();
        break;
      default:
        usage(`unknown argument ${argument}`);
    }
  }
  return options;
}

/** Targets with a source file: fuzz_netlink, fuzz_ethtool, ... */
function availableTargets() {
  return readdirSync(fuzzDir)
    .filter((name) => /^fuzz_\w+\.cc$/.test(name))
    .map((name) => name.slice(0, -'.cc'.length))
    .sort();
}

function run(command, args, what) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (result.error || result.status !== 0) {
    const why = result.error ? result.error.message : `exit status ${result.status}`;
    console.error(`fuzz.mjs: ${what} failed (${why}): ${command} ${args.join(' ')}`);
    process.exit(1);
  }
}

/** Numbers from libFuzzer's output: final stats, else the last status line. */
function summarize(output) {
  const stat = (name) => {
    const match = output.match(new RegExp(`^stat::${name}:\\s+(\\d+)`, 'm'));
    return match ? Number(match[1]) : undefined;
  };
  let execs = stat('number_of_executed_units');
  if (execs === undefined) {
    const lines = [...output.matchAll(/^#(\d+)\s/gm)];
    execs = lines.length > 0 ? Number(lines[lines.length - 1][1]) : 0;
  }
  const artifacts = [...output.matchAll(/Test unit written to (\S+)/g)].map((m) => m[1]);
  const coverage = [...output.matchAll(/^#\d+\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/gm)];
  const last = coverage.length > 0 ? coverage[coverage.length - 1] : undefined;
  return {
    execs,
    newUnits: stat('new_units_added'),
    peakRssMb: stat('peak_rss_mb'),
    artifacts,
    cov: last ? Number(last[1]) : undefined,
    features: last ? Number(last[2]) : undefined,
    corpus: last ? Number(last[3]) : undefined,
    crashed:
      /==\d+==\s*ERROR:|deadly signal|SUMMARY: \w+Sanitizer|libFuzzer: (timeout|out-of-memory)/.test(
        output,
      ),
  };
}

function fuzz(target, options) {
  const binary = join(options.buildDir, target);
  const shortName = target.replace(/^fuzz_/, '');
  const seeds = join(fuzzDir, 'corpus', shortName);
  const work = join(options.buildDir, 'run', target);
  const corpus = join(work, 'corpus');
  const artifacts = join(options.buildDir, 'artifacts', target);
  const logs = join(options.buildDir, 'logs');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(corpus, { recursive: true });
  mkdirSync(artifacts, { recursive: true });
  mkdirSync(logs, { recursive: true });
  let seedCount = 0;
  if (existsSync(seeds)) {
    cpSync(seeds, corpus, { recursive: true });
    seedCount = readdirSync(corpus).length;
  }
  const logFile = join(logs, `${target}.log`);
  const args = [
    `-max_total_time=${options.seconds}`,
    '-print_final_stats=1',
    '-timeout=10',
    '-rss_limit_mb=2048',
    `-artifact_prefix=${artifacts}/`,
    corpus,
  ];
  console.log(
    `${target}: fuzzing for ${options.seconds} s from ${seedCount} seed(s)` +
      `${existsSync(seeds) ? ` (${seeds})` : ' (no seed corpus)'}; log: ${logFile}`,
  );

  return new Promise((resolvePromise) => {
    const started = process.hrtime.bigint();
    const child = spawn(binary, args, { cwd: work, stdio: ['ignore', 'pipe', 'pipe'] });
    const log = createWriteStream(logFile);
    let output = '';
    const collect = (chunk) => {
      const text = chunk.toString();
      output += text;
      // Keep memory bounded on long runs: the numbers we need are at the end, and the
      // artifact lines are found again in the tail.
      if (output.length > 8 * 1024 * 1024) output = output.slice(-4 * 1024 * 1024);
      log.write(chunk);
      if (options.verbose) process.stderr.write(chunk);
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    const forward = (signal) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('error', (error) => {
      log.end();
      console.error(`${target}: cannot run ${binary}: ${error.message}`);
      resolvePromise({ target, failed: true, artifacts: [] });
    });
    child.on('close', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      log.end();
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const summary = summarize(output);
      const crashes =
        summary.artifacts.length > 0 ? summary.artifacts.length : summary.crashed ? 1 : 0;
      const failed = crashes > 0 || code !== 0;
      const rate = seconds > 0 ? Math.round(summary.execs / seconds) : 0;
      console.log(
        `${target}: ${summary.execs} execs in ${Math.round(seconds)} s (${rate}/s), ` +
          `${crashes} crash${crashes === 1 ? '' : 'es'}`,
      );
      const details = [];
      if (summary.cov !== undefined) details.push(`cov ${summary.cov}, ft ${summary.features}`);
      if (summary.corpus !== undefined) details.push(`corpus ${seedCount} -> ${summary.corpus}`);
      if (summary.newUnits !== undefined) details.push(`${summary.newUnits} new units`);
      if (summary.peakRssMb !== undefined) details.push(`peak RSS ${summary.peakRssMb} MB`);
      if (details.length > 0) console.log(`  ${details.join(', ')}; grown corpus in ${corpus}`);
      for (const artifact of summary.artifacts) {
        const path = resolve(work, artifact);
        console.log(`  crash input: ${path}`);
        console.log(`  reproduce:   ${binary} ${path}`);
      }
      if (failed && summary.artifacts.length === 0) {
        console.log(
          `  libFuzzer exited with ${signal ?? `status ${code}`} and wrote no input; see ${logFile}`,
        );
      }
      resolvePromise({ target, failed, artifacts: summary.artifacts });
    });
  });
}

async function main() {
  const options = parseArguments(process.argv.slice(2));
  const available = availableTargets();
  let targets;
  if (options.target === 'all') {
    targets = available;
  } else if (available.includes(options.target)) {
    targets = [options.target];
  } else {
    usage(`no such target ${options.target} (have: ${available.join(', ') || 'none'})`);
  }
  if (targets.length === 0) usage('no fuzz targets in native/fuzz');

  run(
    'cmake',
    [
      '-S',
      join(root, 'native'),
      '-B',
      options.buildDir,
      '-DFG_FUZZ=ON',
      '-DCMAKE_CXX_COMPILER=clang++',
      '-DCMAKE_BUILD_TYPE=RelWithDebInfo',
    ],
    'configuring the fuzz build',
  );
  run(
    'cmake',
    ['--build', options.buildDir, '-j', String(options.jobs), '--target', ...targets],
    'building the fuzz targets',
  );

  let failed = false;
  for (const target of targets) {
    const result = await fuzz(target, options);
    failed ||= result.failed;
  }
  process.exit(failed ? 1 : 0);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
