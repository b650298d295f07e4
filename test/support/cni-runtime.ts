/**
 * A container runtime's side of the CNI protocol, as libcni does it: plugins are found by their
 * `type` in CNI_PATH and executed with CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME,
 * CNI_PATH (and CNI_ARGS) in the environment and the plugin's configuration - with `name`,
 * `cniVersion` and, in a chain, `prevResult` injected - on stdin. Plugins run in the node's
 * network namespace (`ip netns exec NODE`), as they run in the host's on a real node.
 *
 * flannel-guard-cni is installed the way npm installs a package's bin: its compiled file made
 * executable and linked under the name the configuration's `type` uses.
 */
import { chmodSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';

import { spawn, spawnSync } from 'node:child_process';

import { registerSyncCleanup, tempDirPrefix, trackChild, type Netns } from './netns';
import type { ChildResult } from './node-child';

export const DEBIAN_CNI_DIR = '/usr/lib/cni';
/** The compiled plugin (dist/lib/cni/main.js). */
export const CNI_PLUGIN = join(__dirname, '..', '..', 'lib', 'cni', 'main.js');
/** The shim, as `npm run build` (and the test command) builds it for this machine. */
export const CNI_SHIM = join(__dirname, '..', '..', '..', 'build', 'flannel-guard-cni');
/** A PATH without Node.js on it (Debian's node is /usr/bin/node): a node's runtime has none. */
export const PATH_WITHOUT_NODE = '/usr/sbin:/sbin';

export interface PluginRun extends ChildResult {
  /** stdout parsed as JSON, undefined when empty, null when it does not parse. */
  json: unknown;
}

export interface InvokeOptions {
  command: string;
  containerId?: string;
  /** Path of the pod's network namespace. */
  netns?: string;
  ifname?: string;
  cniArgs?: string;
  /** Overrides or removes (undefined) single CNI_* variables. */
  env?: Record<string, string | undefined>;
  /** Raw stdin instead of the JSON of `config`. */
  stdin?: string;
  timeoutMs?: number;
  /** Pins the plugin to these CPUs (`taskset -c`), as on a node starting many pods at once. */
  cpus?: string;
}

export type NetConf = Record<string, unknown> & { type: string };

export interface ConfList {
  name: string;
  cniVersion: string;
  plugins: NetConf[];
}

/** A CNI bin directory with Debian's plugins and flannel-guard-cni, and a node to run them in. */
export class CniRuntime {
  readonly binDir: string;
  readonly #unregister: () => void;

  /** `plugin`: what runs as flannel-guard-cni (the Node.js plugin, or the shim). */
  constructor(
    readonly node: Netns,
    plugin: string = CNI_PLUGIN,
  ) {
    this.binDir = mkdtempSync(tempDirPrefix('cnibin'));
    this.#unregister = registerSyncCleanup(() =>
      rmSync(this.binDir, { recursive: true, force: true }),
    );
    for (const plugin of ['bridge', 'host-local', 'loopback', 'portmap']) {
      symlinkSync(join(DEBIAN_CNI_DIR, plugin), join(this.binDir, plugin));
    }
    chmodSync(plugin, 0o755);
    symlinkSync(plugin, join(this.binDir, 'flannel-guard-cni'));
  }

  dispose(): void {
    rmSync(this.binDir, { recursive: true, force: true });
    this.#unregister();
  }

  /** Executes the plugin named by `config.type` as a runtime does. */
  async invoke(config: NetConf, options: InvokeOptions): Promise<PluginRun> {
    const executable = join(this.binDir, config.type);
    if (!existsSync(executable)) throw new Error(`no plugin ${config.type} in ${this.binDir}`);
    const variables: Record<string, string | undefined> = {
      CNI_COMMAND: options.command,
      CNI_CONTAINERID: options.containerId,
      CNI_NETNS: options.netns,
      CNI_IFNAME: options.ifname,
      CNI_ARGS: options.cniArgs,
      CNI_PATH: this.binDir,
      ...options.env,
    };
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
    for (const [key, value] of Object.entries(variables)) if (value !== undefined) env[key] = value;
    const assignments = Object.entries(env).map(([key, value]) => `${key}=${value ?? ''}`);
    const child = await runChild(
      [
        ...(options.cpus === undefined ? [] : ['taskset', '-c', options.cpus]),
        ...['ip', 'netns', 'exec', this.node.name, 'env', '-i', ...assignments, executable],
      ],
      options.stdin ?? JSON.stringify(config),
      options.timeoutMs ?? 20_000,
    );
    let json: unknown;
    if (child.stdout.trim() !== '') {
      try {
        json = JSON.parse(child.stdout);
      } catch {
        json = null;
      }
    }
    return { ...child, json };
  }

  /** libcni's AddNetworkList: each plugin in order, each given the previous one's result. */
  async addList(
    list: ConfList,
    pod: PodAttachment,
  ): Promise<{ result: unknown; runs: PluginRun[] }> {
    let prevResult: unknown;
    const runs: PluginRun[] = [];
    for (const plugin of list.plugins) {
      const config = pluginConfig(list, plugin, prevResult);
      const run = await this.invoke(config, { command: 'ADD', ...pod });
      runs.push(run);
      if (run.code !== 0)
        throw new Error(`${plugin.type} ADD failed (${run.code}): ${run.stdout}${run.stderr}`);
      prevResult = run.json;
    }
    return { result: prevResult, runs };
  }

  /** libcni's CheckNetworkList: each plugin with the cached result of the ADD. */
  async checkList(list: ConfList, pod: PodAttachment, result: unknown): Promise<PluginRun[]> {
    const runs: PluginRun[] = [];
    for (const plugin of list.plugins) {
      const run = await this.invoke(pluginConfig(list, plugin, result), {
        command: 'CHECK',
        ...pod,
      });
      runs.push(run);
      if (run.code !== 0) break;
    }
    return runs;
  }

  /** libcni's DelNetworkList: the plugins in reverse order. */
  async delList(list: ConfList, pod: PodAttachment, result: unknown): Promise<PluginRun[]> {
    const runs: PluginRun[] = [];
    for (const plugin of [...list.plugins].reverse()) {
      runs.push(await this.invoke(pluginConfig(list, plugin, result), { command: 'DEL', ...pod }));
    }
    return runs;
  }
}

export interface PodAttachment {
  containerId: string;
  netns: string;
  ifname: string;
}

/** The configuration one plugin of a list gets on stdin. */
export function pluginConfig(list: ConfList, plugin: NetConf, prevResult: unknown): NetConf {
  return {
    ...plugin,
    name: list.name,
    cniVersion: list.cniVersion,
    ...(prevResult === undefined ? {} : { prevResult }),
  };
}

/** Runs argv with `stdin` written to it; never rejects. */
function runChild(argv: string[], stdin: string, timeoutMs: number): Promise<ChildResult> {
  const [command, ...args] = argv;
  if (command === undefined) throw new Error('empty argv');
  const started = Date.now();
  return new Promise((resolve) => {
    const child = trackChild(spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] }));
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.stdin?.on('error', () => undefined);
    child.on('error', () => undefined);
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut, elapsedMs: Date.now() - started });
    });
    child.stdin?.end(stdin);
  });
}

// --- the spec's shapes ------------------------------------------------------------------------

const CIDR = /^(\d{1,3}(\.\d{1,3}){3}\/\d{1,2}|[0-9a-f:]+\/\d{1,3})$/i;

/** Asserts a success result of ADD against the 1.0.0 / 1.1.0 result format; returns problems. */
export function resultProblems(result: unknown, cniVersion: string): string[] {
  const problems: string[] = [];
  if (typeof result !== 'object' || result === null) return ['not an object'];
  const r = result as Record<string, unknown>;
  if (r.cniVersion !== cniVersion)
    problems.push(`cniVersion ${String(r.cniVersion)} != ${cniVersion}`);
  const interfaces = r.interfaces;
  if (interfaces !== undefined) {
    if (!Array.isArray(interfaces)) problems.push('interfaces is not an array');
    else
      for (const [i, item] of interfaces.entries()) {
        const iface = item as Record<string, unknown>;
        if (typeof iface.name !== 'string' || iface.name === '')
          problems.push(`interfaces[${i}].name`);
        if (iface.mac !== undefined && typeof iface.mac !== 'string')
          problems.push(`interfaces[${i}].mac`);
        if (iface.sandbox !== undefined && typeof iface.sandbox !== 'string')
          problems.push(`interfaces[${i}].sandbox`);
      }
  }
  const ips = r.ips;
  if (ips !== undefined) {
    if (!Array.isArray(ips)) problems.push('ips is not an array');
    else
      for (const [i, item] of ips.entries()) {
        const ip = item as Record<string, unknown>;
        if (typeof ip.address !== 'string' || !CIDR.test(ip.address))
          problems.push(`ips[${i}].address`);
        if ('version' in ip) problems.push(`ips[${i}].version is not in the 1.0.0 format`);
        if (ip.interface !== undefined) {
          const index = ip.interface;
          if (
            typeof index !== 'number' ||
            !Array.isArray(interfaces) ||
            index < 0 ||
            index >= interfaces.length
          ) {
            problems.push(`ips[${i}].interface ${String(index)} is not an index into interfaces`);
          }
        }
      }
  }
  if (r.dns !== undefined && (typeof r.dns !== 'object' || r.dns === null)) problems.push('dns');
  return problems;
}

/** The spec's error object: exactly cniVersion, code, msg and optionally details. */
export function errorProblems(error: unknown, cniVersion: string): string[] {
  const problems: string[] = [];
  if (typeof error !== 'object' || error === null) return ['not an object'];
  const e = error as Record<string, unknown>;
  for (const key of Object.keys(e)) {
    if (!['cniVersion', 'code', 'msg', 'details'].includes(key))
      problems.push(`unexpected field ${key}`);
  }
  if (e.cniVersion !== cniVersion)
    problems.push(`cniVersion ${String(e.cniVersion)} != ${cniVersion}`);
  if (typeof e.code !== 'number' || !Number.isInteger(e.code) || e.code <= 0) problems.push('code');
  if (typeof e.msg !== 'string' || e.msg === '') problems.push('msg');
  if (e.details !== undefined && typeof e.details !== 'string') problems.push('details');
  return problems;
}

// --- libcni itself ----------------------------------------------------------------------------

const root = join(__dirname, '..', '..', '..');
/** fg-cnitool, built from test/support/cnitool against Debian's libcni (golang-github-appc-cni-dev). */
export const LIBCNI_TOOL = join(root, 'build', 'fg-cnitool');

/** Builds fg-cnitool once per run (GOPATH mode: Debian's Go sources under /usr/share/gocode). */
export function buildLibcniTool(): string {
  const built = spawnSync('go', ['build', '-o', LIBCNI_TOOL, './test/support/cnitool/'], {
    cwd: root,
    encoding: 'utf8',
    env: {
      ...process.env,
      GO111MODULE: 'off',
      GOPATH: '/usr/share/gocode',
      GOCACHE: join(root, 'build', 'go-cache'),
      GOFLAGS: '',
    },
    timeout: 300_000,
  });
  if (built.status !== 0) throw new Error(`building fg-cnitool failed:\n${built.stderr}`);
  return LIBCNI_TOOL;
}

/**
 * libcni's AddNetworkList / CheckNetworkList / DelNetworkList on a conflist
 * file, in the runtime's namespace (the node), as containerd runs them.
 */
export function libcni(
  runtime: CniRuntime,
  command: 'ADD' | 'CHECK' | 'DEL',
  conflist: string,
  pod: PodAttachment,
  cacheDir: string,
  path: string = process.env.PATH ?? '/usr/bin:/bin',
): Promise<ChildResult> {
  return runChild(
    [
      'ip',
      'netns',
      'exec',
      runtime.node.name,
      'env',
      '-i',
      `PATH=${path}`,
      `CNI_PATH=${runtime.binDir}`,
      LIBCNI_TOOL,
      command,
      conflist,
      pod.containerId,
      pod.netns,
      pod.ifname,
      cacheDir,
    ],
    '',
    30_000,
  );
}

/** libcni 1.2's GetStatusNetworkList / GCNetworkList on a conflist file (fg-cnitool runs them). */
export function libcniStatusOrGc(
  runtime: CniRuntime,
  command: 'STATUS' | 'GC',
  conflist: string,
  path: string = process.env.PATH ?? '/usr/bin:/bin',
): Promise<ChildResult> {
  return runChild(
    [
      ...['ip', 'netns', 'exec', runtime.node.name, 'env', '-i', `PATH=${path}`],
      ...[`CNI_PATH=${runtime.binDir}`, LIBCNI_TOOL, command, conflist],
    ],
    '',
    30_000,
  );
}
