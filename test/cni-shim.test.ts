/**
 * The node-native CNI path: the shim (build/flannel-guard-cni, static, no libc) run by the
 * runtime's own library, libcni (Debian's, through fg-cnitool), on flannel's chain as it
 * delegates it - bridge with host-local, portmap, then the shim - with no Node.js on the
 * runtime's PATH; the guard answering on its socket from its live state. Then the documented
 * answers when no guard does, and the hostile ends of both sides of the socket: a server that
 * never answers, stops mid-answer, answers garbage or is not root; a client that sends garbage,
 * a truncated or an oversized frame, or is not root.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';

import { encodeRequest } from '../lib/cni/frame';
import { parsePluginConfig } from '../lib/cni/request';
import { guardBackend } from '../lib/cni/server';
import type { PodCheck, PodCheckDrift } from '../lib/guard/pod-check';
import type { PeerRow, PeerVerdict } from '../lib/mesh/compare';
import { GuardProcess } from './support/guard-process';
import {
  CNI_SHIM,
  CniRuntime,
  PATH_WITHOUT_NODE,
  buildLibcniTool,
  errorProblems,
  libcni,
  libcniStatusOrGc,
  resultProblems,
  type PluginRun,
} from './support/cni-runtime';
import { Netns, registerSyncCleanup, tempDirPrefix, trackChild } from './support/netns';
import { FlannelTestbed, VTEP, type TestbedNode } from './support/testbed';
import { pingFrom } from './support/traffic';
import { prng } from './support/prng';

const PREV = { cniVersion: '1.1.0', interfaces: [{ name: 'eth0' }], ips: [] };

function assertError(run: PluginRun, code: number, reason?: RegExp): void {
  assert.equal(run.code, 1, `${run.stdout}${run.stderr}`);
  assert.deepEqual(errorProblems(run.json, '1.1.0'), [], run.stdout);
  const error = run.json as { code: number; msg: string; details?: string };
  assert.equal(error.code, code, run.stdout);
  if (reason) assert.match(`${error.msg} ${error.details ?? ''}`, reason);
}

describe('flannel-guard-cni, the shim: libcni, the guard socket, and no Node.js on the runtime', function () {
  this.timeout(180_000);
  let bed: FlannelTestbed;
  let n1: TestbedNode;
  let n2: TestbedNode;
  let runtime: CniRuntime;
  let dir: string;
  let state: string;
  let socket: string;
  let guard: GuardProcess | undefined;
  const pods: Netns[] = [];
  let counter = 0;

  /** Every rewrite corrected at once (a window of 1 ms: no backoff), unless told otherwise. */
  const startGuard = async (fight = ['--rewrite-window', '1']): Promise<GuardProcess> => {
    const started = await GuardProcess.start([
      ...fight,
      '--netns',
      n1.ns.name,
      '--mac',
      `${VTEP}=${n1.publishedMac}`,
      '--offload',
      'tx-checksum-ip-generic=off',
      '--state-dir',
      state,
      '--cni-socket',
      'on',
    ]);
    await started.waitFor((line) => line.event === 'cniSocket', 10_000);
    return started;
  };

  /** The shim alone, as a runtime executes it, with PATH free of Node.js. */
  const shim = (
    command: string,
    fields: Record<string, unknown> = {},
    options: { stdin?: string; timeoutMs?: number } = {},
  ): Promise<PluginRun> =>
    runtime.invoke(
      {
        cniVersion: '1.1.0',
        name: 'cbr0',
        type: 'flannel-guard-cni',
        socket,
        prevResult: PREV,
        budgetMs: 2000,
        ...fields,
      },
      {
        command,
        containerId: 'ctr1',
        netns: '/run/netns/none',
        ifname: 'eth0',
        env: { PATH: PATH_WITHOUT_NODE },
        ...options,
      },
    );

  const conflist = (extra: Record<string, unknown> = {}): string => {
    const file = join(dir, `conflist-${(counter += 1)}.json`);
    writeFileSync(
      file,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'cbr0',
        plugins: [
          {
            type: 'bridge',
            bridge: 'cni0',
            isGateway: true,
            mtu: 1450,
            ipam: {
              type: 'host-local',
              dataDir: join(dir, 'ipam'),
              ranges: [[{ subnet: n1.podCidr, rangeStart: '198.18.1.10', gateway: n1.gatewayIp }]],
              routes: [{ dst: '198.18.0.0/15', gw: n1.gatewayIp }],
            },
          },
          { type: 'portmap', capabilities: { portMappings: true } },
          { type: 'flannel-guard-cni', socket, budgetMs: 2000, ...extra },
        ],
      }),
    );
    return file;
  };

  const newPod = async (): Promise<{
    ns: Netns;
    containerId: string;
    netns: string;
    ifname: string;
  }> => {
    const ns = await Netns.create('fgt-shimpod');
    pods.push(ns);
    counter += 1;
    return { ns, containerId: `shim${counter}`, netns: ns.path, ifname: 'eth0' };
  };

  before(async function () {
    buildLibcniTool();
    assert.notEqual(
      spawnSync('sh', ['-c', 'command -v node'], { env: { PATH: PATH_WITHOUT_NODE } }).status,
      0,
      'no node on the runtime PATH',
    );
    bed = await FlannelTestbed.create({ nodes: 2, udev: false });
    [n1, n2] = [bed.node(1), bed.node(2)];
    runtime = new CniRuntime(n1.ns, CNI_SHIM);
    dir = mkdtempSync(tempDirPrefix('cnishim'));
    registerSyncCleanup(() => rmSync(dir, { recursive: true, force: true }));
    state = join(dir, 'state');
    socket = join(state, 'cni.sock');
    guard = await startGuard();
  });

  after(async function () {
    await guard?.stop();
    runtime.dispose();
    await Promise.all(pods.map((pod) => pod.destroy()));
    await bed.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  it('ADD, CHECK and DEL by libcni through bridge, host-local, portmap and the shim; STATUS and GC as a 1.1 runtime sends them', async function () {
    const pod = await newPod();
    const list = conflist();
    const cache = join(dir, 'cache');
    const added = await libcni(runtime, 'ADD', list, pod, cache, PATH_WITHOUT_NODE);
    assert.equal(added.code, 0, added.stderr);
    const result = JSON.parse(added.stdout) as { ips: { address: string }[] };
    assert.deepEqual(resultProblems(result, '1.0.0'), []);
    assert.match(result.ips[0]?.address ?? '', /^198\.18\.1\.\d+\/24$/);
    assert.equal(await pingFrom(pod.ns, n2.podIp, 2000), true, "the pod reaches node 2's pod");
    const checked = await libcni(runtime, 'CHECK', list, pod, cache, PATH_WITHOUT_NODE);
    assert.equal(checked.code, 0, checked.stderr);
    const deleted = await libcni(runtime, 'DEL', list, pod, cache, PATH_WITHOUT_NODE);
    assert.equal(deleted.code, 0, deleted.stderr);
    // STATUS and GC on a 1.1.0 list (Debian's bridge speaks 1.0.0: a 1.1 runtime skips a 1.0 list).
    const statusList = join(dir, 'status.conflist');
    writeFileSync(
      statusList,
      JSON.stringify({
        cniVersion: '1.1.0',
        name: 'cbr0',
        plugins: [{ type: 'flannel-guard-cni', socket }],
      }),
    );
    for (const command of ['STATUS', 'GC'] as const) {
      const run = await libcniStatusOrGc(runtime, command, statusList, PATH_WITHOUT_NODE);
      assert.equal(run.code, 0, `${command}: ${run.stdout}${run.stderr}`);
    }
    const version = await shim('VERSION', {}, { stdin: '{"cniVersion":"1.0.0"}' });
    assert.deepEqual(version.json, { cniVersion: '1.0.0', supportedVersions: ['1.0.0', '1.1.0'] });
  });

  it('a drifted VTEP is right when ADD answers (seeded: MAC, offload, flushed entries; the guard busy or not)', async function () {
    const seed = Number(process.env.FGT_SEED ?? Date.now() % 1_000_000);
    const random = prng(seed);
    const rounds = 12;
    for (let round = 0; round < rounds; round += 1) {
      const what = `seed ${seed} round ${round}`;
      const drifts = [
        () => n1.setVtepMac(`0e:00:00:00:0${round % 10}:${(10 + round).toString(16)}`),
        () => n1.ns.run(['ethtool', '-K', VTEP, 'tx-checksum-ip-generic', 'on']),
      ].filter(() => random() < 0.7);
      // The guard stopped while the VTEP drifts and the call arrives: it sees both at once.
      const paused = guard !== undefined && random() < 0.5;
      if (paused) guard?.signal('SIGSTOP');
      try {
        for (const drift of drifts) await drift();
        const call = shim('ADD');
        if (paused) {
          await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * 30)));
          guard?.signal('SIGCONT');
        }
        const run = await call;
        assert.equal(run.code, 0, `${what}: ${run.stderr}`);
        assert.deepEqual(run.json, PREV, what);
      } finally {
        guard?.signal('SIGCONT');
      }
      assert.equal(await n1.currentMac(), n1.publishedMac, what);
      assert.equal(await n1.feature('tx-checksum-ip-generic'), 'off', what);
      assert.deepEqual(
        (await n1.neighbours()).map((n) => [n.dst, n.lladdr]),
        [[n2.vtepIp, n2.publishedMac]],
        `${what}: the flushed entry is back`,
      );
    }
  });

  it('CHECK fails (100) and ADD says so while another writer holds the MAC and the guard leaves it (contested)', async function () {
    await guard?.stop();
    guard = await startGuard(['--max-rewrites', '3']);
    const run = await shim('CHECK');
    assert.equal(run.code, 0, run.stdout);
    // A rewrite storm: the guard's fight control gives up for its quiet period.
    for (let i = 0; i < 6; i += 1) await n1.setVtepMac(`0e:00:00:00:01:${(16 + i).toString(16)}`);
    await guard?.waitFor((line) => line.event === 'contested', 10_000);
    const check = await shim('CHECK');
    assertError(
      check,
      100,
      /VTEP flannel\.1 drifted mac: expected \S+, found \S+ \(contested: left alone\)/,
    );
    const add = await shim('ADD', { failOnError: true });
    assertError(add, 100, /contested/);
    const lenient = await shim('ADD');
    assert.equal(lenient.code, 0);
    assert.match(lenient.stderr, /still not as desired: mac: expected/);
    // Back as it should be for the next tests: the guard resumes after its quiet period.
    await guard?.stop();
    await n1.setVtepMac(n1.publishedMac);
    await bed.programLocal(n1);
    guard = await startGuard();
  });

  it('with the guard down: ADD passes prevResult on (error 11 with failOnError), CHECK 11, STATUS 50 naming the socket, DEL and GC succeed', async function () {
    await guard?.stop();
    guard = undefined;
    assert.deepEqual(
      readdirSync(state).includes('cni.sock'),
      false,
      'the guard removed its socket',
    );
    // A socket file left without a listener (a guard killed hard): refused, the same answers.
    const stale = join(dir, 'stale.sock');
    spawnSync(process.execPath, [
      '-e',
      `require('net').createServer().listen(${JSON.stringify(stale)}, () => process.kill(process.pid, 'SIGKILL'))`,
    ]);
    assert.ok(readdirSync(dir).includes('stale.sock'));
    for (const path of [socket, stale]) {
      const add = await shim('ADD', { socket: path });
      assert.equal(add.code, 0, add.stdout);
      assert.deepEqual(add.json, PREV);
      assert.match(
        add.stderr,
        new RegExp(
          `no flannel-guard answered on ${path} \\(connect: E(NOENT|CONNREFUSED)\\): the VTEP was not checked`,
        ),
      );
      assertError(
        await shim('ADD', { socket: path, failOnError: true }),
        11,
        /no flannel-guard answered/,
      );
      assertError(await shim('CHECK', { socket: path }), 11, /no flannel-guard answered/);
      assertError(
        await shim('STATUS', { socket: path, prevResult: undefined }),
        50,
        new RegExp(path),
      );
      for (const command of ['DEL', 'GC']) {
        const run = await shim(command, { socket: path });
        assert.equal(run.code, 0, run.stdout);
        assert.equal(run.stdout, '');
      }
      // And as libcni 1.2 runs them on a list: STATUS fails naming the socket, GC goes through.
      const list = join(dir, 'down.conflist');
      writeFileSync(
        list,
        JSON.stringify({
          cniVersion: '1.1.0',
          name: 'cbr0',
          plugins: [{ type: 'flannel-guard-cni', socket: path }],
        }),
      );
      const status = await libcniStatusOrGc(runtime, 'STATUS', list, PATH_WITHOUT_NODE);
      assert.equal(status.code, 1);
      assert.match(status.stderr, new RegExp(`no flannel-guard answered on ${path}`));
      assert.equal((await libcniStatusOrGc(runtime, 'GC', list, PATH_WITHOUT_NODE)).code, 0);
    }
    guard = await startGuard();
  });

  describe('hostile ends of the socket', function () {
    let fakes: string;
    const servers: Server[] = [];

    before(function () {
      fakes = join(dir, 'fakes');
      mkdirSync(fakes);
      chmodSync(fakes, 0o777);
      chmodSync(dir, 0o711); // uid 65534 passes through to fakes/
    });

    after(function () {
      for (const server of servers) server.close();
    });

    /** A server at a path of its own that does `onConnection` with each shim. */
    const fake = async (name: string, onConnection: (socket: Socket) => void): Promise<string> => {
      const path = join(fakes, `${name}.sock`);
      const server = createServer((socket) => {
        socket.on('error', () => undefined); // the shim leaves when it has its answer
        onConnection(socket);
      });
      servers.push(server);
      await new Promise<void>((resolve) => server.listen(path, resolve));
      return path;
    };

    it('a server that never answers, stops mid-answer, answers garbage or too much: the fallbacks, within the budget and its margin', async function () {
      const header = (status: number, out: number, err: number): Buffer => {
        const bytes = Buffer.alloc(16);
        bytes.write('FGR1');
        bytes.writeUInt32LE(status, 4);
        bytes.writeUInt32LE(out, 8);
        bytes.writeUInt32LE(err, 12);
        return bytes;
      };
      const cases: [string, (socket: Socket) => void, RegExp][] = [
        ['silent', () => undefined, /did not answer in time/],
        [
          'cut',
          (s) => s.end(Buffer.concat([header(0, 100, 0), Buffer.from('{"partial":')])),
          /closed the connection mid-answer/,
        ],
        ['garbage', (s) => s.end(Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n')), /not an answer/],
        ['huge', (s) => s.end(header(0, 0xffffffff, 0)), /out of bounds/],
        [
          'long',
          (s) => s.end(Buffer.concat([header(0, 2, 0), Buffer.from('{}extra')])),
          /runs past its length/,
        ],
      ];
      for (const [name, behaviour, reason] of cases) {
        const path = await fake(name, behaviour);
        const started = Date.now();
        const add = await shim('ADD', { socket: path, budgetMs: 300 });
        const elapsedMs = Date.now() - started;
        assert.equal(add.code, 0, `${name}: ${add.stdout}`);
        assert.deepEqual(add.json, PREV, name);
        assert.match(add.stderr, reason, name);
        // 300 ms budget, 750 ms margin: a generous bound, the shim must not wait for the guard.
        assert.ok(elapsedMs < 10_000, `${name}: ${elapsedMs} ms`);
        assertError(await shim('CHECK', { socket: path, budgetMs: 300 }), 11, reason);
      }
    });

    it("a socket served by another user than root is not the guard's", async function () {
      const path = join(fakes, 'nobody.sock');
      const child = trackChild(
        spawn(
          process.execPath,
          [
            '-e',
            `require('net').createServer((s) => s.end()).listen(${JSON.stringify(path)}, () => console.log('up'))`,
          ],
          { uid: 65534, gid: 65534, stdio: ['ignore', 'pipe', 'inherit'] },
        ),
      );
      try {
        await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()));
        const add = await shim('ADD', { socket: path });
        assert.equal(add.code, 0);
        assert.match(add.stderr, /the socket is served by uid 65534, not root/);
        assertError(await shim('STATUS', { socket: path, prevResult: undefined }), 50, /uid 65534/);
      } finally {
        child.kill('SIGKILL');
      }
    });

    it('the guard closes what is not a request (garbage, a truncated or oversized frame, a peer not root) and goes on answering', async function () {
      const send = (bytes: Buffer, end = true): Promise<string> =>
        new Promise((resolve) => {
          const client = createConnection(socket);
          let got = '';
          client.on('data', (chunk: Buffer) => (got += chunk.toString('latin1')));
          client.on('error', () => undefined);
          client.on('close', () => resolve(got));
          client.on('connect', () => (end ? client.end(bytes) : client.write(bytes)));
        });
      const from = guard?.lines.length ?? 0;
      const whole = encodeRequest({
        env: { CNI_COMMAND: 'STATUS' },
        stdin: JSON.stringify({ cniVersion: '1.1.0', name: 'x', type: 'flannel-guard-cni' }),
      });
      const oversized = Buffer.from(whole);
      oversized.writeUInt32LE(64 * 1024 * 1024, 8);
      assert.equal(await send(Buffer.from('GET / HTTP/1.1\r\n\r\n')), '');
      assert.equal(await send(whole.subarray(0, whole.length - 5)), '');
      assert.equal(await send(oversized), '');
      assert.equal(await send(Buffer.concat([whole, Buffer.from('x')])), '');
      const answered = await send(whole);
      assert.ok(answered.startsWith('FGR1'), 'a whole request is answered');
      for (const reason of [
        /not a request frame/,
        /the request was cut short/,
        /stdin is larger than/,
        /bytes past the end of the request/,
      ]) {
        await guard?.waitFor(
          (line) => line.event === 'cniSocket' && reason.test(String(line.message)),
          5000,
          from,
        );
      }
      // A peer that is not root, let through the file's mode: refused by SO_PEERCRED.
      chmodSync(socket, 0o666);
      chmodSync(state, 0o755);
      try {
        const child = spawnSync(
          process.execPath,
          [
            '-e',
            `const c = require('net').createConnection(${JSON.stringify(socket)}); c.on('connect', () => c.write(Buffer.from(${JSON.stringify(whole.toString('base64'))}, 'base64'))); c.on('data', (d) => process.stdout.write(d)); c.on('error', () => {});`,
          ],
          { uid: 65534, gid: 65534, encoding: 'latin1', timeout: 10_000 },
        );
        assert.equal(child.stdout, '', 'nothing answered to uid 65534');
        await guard?.waitFor(
          (line) => line.event === 'cniSocket' && /uid 65534 refused/.test(String(line.message)),
          5000,
          from,
        );
      } finally {
        chmodSync(socket, 0o600);
        chmodSync(state, 0o700);
      }
      const status = await shim('STATUS', { prevResult: undefined });
      assert.equal(status.code, 0, status.stdout);
    });

    it('a request over the bound: error 6 from the shim itself (DEL succeeds)', async function () {
      const stdin = `{"cniVersion":"1.1.0","name":"x","type":"t","pad":"${'x'.repeat(8 * 1024 * 1024)}"}`;
      assertError(await shim('ADD', {}, { stdin }), 6, /stdin is larger than 8388608 bytes/);
      const del = await shim('DEL', {}, { stdin });
      assert.equal(del.code, 0);
      assert.match(del.stderr, /DEL: nothing to release \(stdin too large\)/);
    });
  });
});

/**
 * The shim reads a few fields of the configuration without a JSON library (shim_json.c): it must
 * read them as JSON.parse does. Seeded random configurations, written with random whitespace,
 * escapes in keys and values, repeated keys, numbers in every form and nesting, each run through
 * the shim with no guard to answer: what it passes on, echoes and names is held to JSON.parse's
 * reading of the same text; a text cut short is refused as JSON.parse refuses it.
 */
describe('flannel-guard-cni, the shim: its reading of the configuration against JSON.parse (seeded)', function () {
  this.timeout(120_000);
  const seed = Number(process.env.FGT_SEED ?? Date.now() % 1_000_000);
  const random = prng(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const space = (): string => pick(['', ' ', '\n', '\t', '\r\n  ', '']);
  /** A JSON string token for `text`, each character escaped at random. */
  const quote = (text: string): string =>
    `"${[...text]
      .map((c) => {
        const plain = JSON.stringify(c).slice(1, -1);
        if (random() < 0.3) return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
        if (c === '/' && random() < 0.5) return '\\/';
        return plain;
      })
      .join('')}"`;
  const number = (): string =>
    pick(['0', '-0', '12', '1.5', '1e3', '2E+2', '-7.25e-1', '1000.000', '5e-1', '123456789']);
  const value = (depth: number): string => {
    const kind = depth > 3 ? pick(['s', 'n', 'l']) : pick(['s', 'n', 'l', 'o', 'a']);
    if (kind === 's')
      return quote(pick(['', 'eth0', 'a"b', 'back\\slash', 'tab\there', 'ünï', '😀', '\u0001']));
    if (kind === 'n') return number();
    if (kind === 'l') return pick(['true', 'false', 'null']);
    const count = Math.floor(random() * 4);
    const items = Array.from({ length: count }, () =>
      kind === 'a'
        ? `${space()}${value(depth + 1)}${space()}`
        : `${space()}${quote(pick(['a', 'b', 'ips', 'x y']))}${space()}:${space()}${value(depth + 1)}${space()}`,
    );
    return kind === 'a' ? `[${items.join(',')}${space()}]` : `{${items.join(',')}${space()}}`;
  };
  const configuration = (socketDir: string): string => {
    const members: string[] = [];
    const fields: [string, () => string][] = [
      ['cniVersion', () => pick([quote('1.0.0'), quote('1.1.0'), quote('9.x'), '1', 'null'])],
      ['name', () => quote('cbr0')],
      ['type', () => quote('flannel-guard-cni')],
      ['prevResult', () => value(0)],
      ['failOnError', () => pick(['true', 'false', '0', '"true"'])],
      ['budgetMs', () => pick(['200', '2e2', '200.0', '-1', '"200"', '0'])],
      ['socket', () => pick([quote(join(socketDir, 'none.sock')), quote('relative.sock'), '7'])],
      ['other', () => value(0)],
    ];
    for (const [key, make] of fields) {
      const times = random() < 0.15 ? 2 : random() < 0.85 ? 1 : 0; // repeated: the last wins
      for (let i = 0; i < times; i += 1)
        members.push(`${space()}${quote(key)}${space()}:${space()}${make()}${space()}`);
    }
    members.sort(() => random() - 0.5);
    return `${space()}{${members.join(',')}}${space()}`;
  };

  it(`ADD and VERSION as JSON.parse reads the text (seed ${seed})`, async function () {
    const socketDir = mkdtempSync(tempDirPrefix('shimjson'));
    registerSyncCleanup(() => rmSync(socketDir, { recursive: true, force: true }));
    const run = (
      command: string,
      stdin: string,
    ): Promise<{ code: number | null; stdout: string; stderr: string }> =>
      new Promise((resolve) => {
        const child = trackChild(
          spawn(CNI_SHIM, [], { env: { CNI_COMMAND: command }, stdio: 'pipe' }),
        );
        let stdout = '';
        let stderr = '';
        child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
        child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
        child.stdin?.end(stdin);
      });
    for (let i = 0; i < 250; i += 1) {
      let text = configuration(socketDir);
      if (random() < 0.2) text = text.slice(0, Math.floor(random() * text.length)); // cut short
      const what = `seed ${seed} case ${i}: ${text}`;
      let parsed: Record<string, unknown> | undefined;
      try {
        const value: unknown = JSON.parse(text);
        if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
          parsed = value as Record<string, unknown>;
        }
      } catch {
        parsed = undefined;
      }
      const add = await run('ADD', text);
      const version = await run('VERSION', text);
      if (parsed === undefined) {
        assert.equal(add.code, 1, what);
        assert.equal((JSON.parse(add.stdout) as { code: number }).code, 6, what);
        if (text.trim() !== '') assert.equal(version.code, 1, what);
        continue;
      }
      assert.deepEqual(
        JSON.parse(version.stdout),
        {
          cniVersion: typeof parsed.cniVersion === 'string' ? parsed.cniVersion : '1.1.0',
          supportedVersions: ['1.0.0', '1.1.0'],
        },
        what,
      );
      const socketPath = parsed.socket;
      if (
        socketPath !== undefined &&
        (typeof socketPath !== 'string' || !socketPath.startsWith('/'))
      ) {
        assert.equal((JSON.parse(add.stdout) as { code: number }).code, 7, what);
        continue;
      }
      const error =
        add.code === 0 ? undefined : (JSON.parse(add.stdout) as { code: number; msg: string });
      const expectedVersion =
        typeof parsed.cniVersion === 'string' && /^\d+\.\d+\.\d+$/.test(parsed.cniVersion)
          ? parsed.cniVersion
          : '1.1.0';
      if (parsed.failOnError === true) {
        assert.deepEqual(
          [error?.code, error && (JSON.parse(add.stdout) as { cniVersion: string }).cniVersion],
          [11, expectedVersion],
          what,
        );
        assert.match(
          error?.msg ?? '',
          new RegExp(
            `answered on ${typeof socketPath === 'string' ? socketPath : '/run/flannel-guard/cni.sock'}`,
          ),
          what,
        );
      } else if (parsed.prevResult === undefined) {
        assert.equal(error?.code, 7, what);
      } else {
        assert.equal(add.code, 0, what + add.stdout);
        assert.deepEqual(JSON.parse(add.stdout), parsed.prevResult, what);
      }
    }
  });
});

/**
 * The guard's backend (cni/server.ts) between the CNI semantics and the guard's pod check: the
 * device's own drift is repaired and waited for, a peer's mesh row that is not healthy is said
 * and not waited for (the mesh view repairs after its grace), `direct` counts as healthy, and a
 * device the guard does not keep is ENODEV. The pod check here is the seam's shape, answering
 * what a test sets; the real one runs in the suites above.
 */
describe('the guard backend: its own drift waited for, the mesh said', function () {
  const row = (node: string, verdict: PeerVerdict, device = 'flannel.1'): PeerRow => ({
    node,
    family: 'ipv4',
    device,
    vtepIp: `198.18.${node.length}.0`,
    publishedMac: '0e:00:00:00:00:01',
    publicIp: '192.0.2.9',
    arpMac: null,
    fdbDst: null,
    verdict,
  });

  it('ADD waits for the device, not for the mesh; CHECK fails on either; ENODEV for a device not kept', async function () {
    let own: PodCheckDrift[] = [
      {
        kind: 'offload',
        subject: 'tx-checksum-ip-generic',
        expected: 'off',
        observed: 'on',
        fixable: true,
      },
    ];
    let repairs = 0;
    const pods = {
      drift: (name: string) => (name === 'flannel.1' ? own : null),
      repair: () => {
        repairs += 1;
        setTimeout(() => (own = []), 20); // the guard's correction lands a little later
      },
    } as unknown as PodCheck;
    const peers = [
      row('b', 'ok'),
      row('cc', 'stale-mac'),
      row('ddd', 'direct'),
      row('e', 'missing', 'flannel.2'),
    ];
    const backend = guardBackend({
      pods,
      mesh: () => ({ table: { self: [], peers, orphans: [] } }),
    });
    const plugin = parsePluginConfig({});
    const checked = await backend.ensure(plugin, false, new AbortController().signal);
    assert.equal(checked.ok, false);
    assert.deepEqual(
      checked.drift.map((d) => `${d.kind} ${d.subject ?? ''}`),
      ['offload tx-checksum-ip-generic', 'neighbour 198.18.2.0 (node cc)'],
    );
    assert.equal(repairs, 0, 'CHECK repairs nothing');
    const added = await backend.ensure(plugin, true, new AbortController().signal);
    assert.equal(repairs, 1);
    assert.equal(added.interrupted, false, 'the mesh row is not waited for');
    assert.equal(added.writes, 1);
    assert.equal(added.ok, false, 'the mesh row is still there');
    assert.deepEqual(
      added.drift.map((d) => d.observed),
      ['on', 'stale-mac in the mesh'],
      'what differed when asked',
    );
    await assert.rejects(
      backend.ensure(parsePluginConfig({ device: 'vxlan9' }), false, new AbortController().signal),
      /ENODEV: vxlan9 is not a device the guard keeps/,
    );
  });
});
