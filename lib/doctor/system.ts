/**
 * What the doctor reads from the running system besides rtnetlink: the kernel release, the UDP
 * sockets and their owners, the NAT rule set, sysfs, and driver information. Everything that
 * depends on the network namespace is read inside it (a short `nsenter` child when the
 * namespace is not the process's own). Tests replace single probes; the real ones are here.
 */
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { release } from 'node:os';

import { binding } from '../core/binding';
import { getChecksumErrors, getDriverInfo, getFeatures } from '../core/oneshot';
import type { PathAnswer } from '../guard/events';
import type { ChecksumErrorCounters, DriverInfo, FeatureState } from '../core/types';
import { resolveNetnsPath } from '../core/validate';
import type { FsRoot } from '../core/fsroot';
import { readHostFacts } from '../udev/host';
import type { HostFacts } from '../udev/link-files';

export interface UdpSocket {
  family: 'inet' | 'inet6';
  localAddress: string;
  port: number;
  inode: number;
}

export interface SocketOwner {
  pid: number;
  command: string;
}

export interface NatRules {
  /** The tools that answered, with their output. */
  sources: { tool: string; text: string }[];
  /** Tools that could not be run, with why. */
  unavailable: string[];
}

export interface SystemProbe {
  kernelRelease(): string;
  host(): HostFacts;
  udpSockets(): Promise<UdpSocket[]>;
  /** Processes holding each socket inode (none: a kernel socket, e.g. the VXLAN device's). */
  socketOwners(inodes: readonly number[]): Promise<Map<number, SocketOwner[]>>;
  natRules(): Promise<NatRules>;
  driverInfo(ifname: string): Promise<DriverInfo>;
  /** The interface's offload features (ETHTOOL_GFEATURES), read only. */
  features(ifname: string): Promise<FeatureState[]>;
  /** /sys/class/net/IFNAME/addr_assign_type in the namespace; null when unreadable. */
  addrAssignType(ifname: string, ifindex: number): Promise<number | null>;
  /** The interface that has `address`, or null. */
  interfaceWithAddress(address: string): Promise<string | null>;
  /** One round of path probes through `device` (native/path_probe.h). */
  probePaths(device: string, addresses: readonly string[]): Promise<PathAnswer[]>;
  /** The namespace's receive checksum-error counters (/proc/net/snmp). */
  checksumErrors(): Promise<ChecksumErrorCounters>;
}

interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  error?: string;
}

function run(argv: readonly string[], timeoutMs = 3000): Promise<RunResult> {
  const [command, ...args] = argv;
  return new Promise((resolve) => {
    if (command === undefined) {
      resolve({ code: null, stdout: '', stderr: '', error: 'empty command' });
      return;
    }
    execFile(
      command,
      args,
      { timeout: timeoutMs, maxBuffer: 32 * 1024 * 1024, encoding: 'utf8' },
      (error, stdout, stderr) => {
        const failure = error as (Error & { code?: unknown }) | null;
        resolve({
          code: failure ? (typeof failure.code === 'number' ? failure.code : null) : 0,
          stdout,
          stderr,
          ...(failure && typeof failure.code !== 'number' ? { error: failure.message } : {}),
        });
      },
    );
  });
}

/** Parses /proc/net/udp or udp6. */
export function parseProcNetUdp(text: string, family: 'inet' | 'inet6'): UdpSocket[] {
  const sockets: UdpSocket[] = [];
  for (const line of text.split('\n').slice(1)) {
    const fields = line.trim().split(/\s+/);
    const local = fields[1];
    const inode = Number(fields[9]);
    if (local === undefined || !local.includes(':') || !Number.isInteger(inode)) continue;
    const [hexAddress, hexPort] = local.split(':');
    sockets.push({
      family,
      localAddress: decodeProcAddress(hexAddress ?? ''),
      port: parseInt(hexPort ?? '0', 16),
      inode,
    });
  }
  return sockets;
}

function decodeProcAddress(hex: string): string {
  const bytes = Buffer.from(hex, 'hex');
  if (bytes.length === 4) return [...bytes].reverse().join('.');
  // IPv6: four host-order 32-bit words.
  const words: string[] = [];
  for (let i = 0; i < bytes.length; i += 4) {
    const word = Buffer.from(bytes.subarray(i, i + 4)).reverse();
    words.push(word.toString('hex').slice(0, 4), word.toString('hex').slice(4));
  }
  return words.join(':').replace(/(^|:)0{1,3}(?=[0-9a-f])/g, '$1');
}

export interface ProbeOptions {
  netns?: string;
  fs: FsRoot;
  kernelRelease?: string;
}

/** The probes of the running system, for `netns` (the process's own when undefined). */
/** A round's wait for answers, and a closed port in traceroute's range. */
const PROBE_TIMEOUT_MS = 1_000;
const PROBE_PORT = 33_434;

export function systemProbe(options: ProbeOptions): SystemProbe {
  const netnsPath = options.netns === undefined ? undefined : resolveNetnsPath(options.netns);
  const inNetns = (argv: readonly string[]): string[] =>
    netnsPath === undefined ? [...argv] : ['nsenter', `--net=${netnsPath}`, '--', ...argv];
  /** Files read inside the namespace, by a shell that prints "=== PATH" before each. */
  const readFiles = async (
    paths: readonly string[],
    sysfs: boolean,
  ): Promise<Map<string, string>> => {
    const contents = new Map<string, string>();
    if (netnsPath === undefined) {
      for (const path of paths) {
        try {
          contents.set(path, readFileSync(path, 'utf8'));
        } catch {
          /* missing */
        }
      }
      return contents;
    }
    const script = `${sysfs ? 'mount -t sysfs sysfs /sys || exit 1; ' : ''}for f; do echo "=== $f"; cat "$f" 2>/dev/null; done`;
    const argv = sysfs
      ? inNetns(['unshare', '-m', '--propagation', 'private', 'sh', '-c', script, 'sh', ...paths])
      : inNetns(['sh', '-c', script, 'sh', ...paths]);
    const result = await run(argv);
    let current: string | null = null;
    for (const line of result.stdout.split('\n')) {
      if (line.startsWith('=== ')) {
        current = line.slice(4);
        contents.set(current, '');
      } else if (current !== null) {
        contents.set(current, `${contents.get(current) ?? ''}${line}\n`);
      }
    }
    return contents;
  };

  return {
    kernelRelease: () => options.kernelRelease ?? release(),
    host: () => readHostFacts(options.fs, options.kernelRelease),
    async udpSockets() {
      const files = await readFiles(['/proc/net/udp', '/proc/net/udp6'], false);
      return [
        ...parseProcNetUdp(files.get('/proc/net/udp') ?? '', 'inet'),
        ...parseProcNetUdp(files.get('/proc/net/udp6') ?? '', 'inet6'),
      ];
    },
    socketOwners(inodes) {
      const wanted = new Set(inodes.map((inode) => `socket:[${inode}]`));
      const owners = new Map<number, SocketOwner[]>();
      if (wanted.size === 0) return Promise.resolve(owners);
      for (const entry of readdirSync('/proc')) {
        if (!/^\d+$/.test(entry)) continue;
        let fds: string[];
        try {
          fds = readdirSync(`/proc/${entry}/fd`);
        } catch {
          continue;
        }
        for (const fd of fds) {
          let target: string;
          try {
            target = readlinkSync(`/proc/${entry}/fd/${fd}`);
          } catch {
            continue;
          }
          if (!wanted.has(target)) continue;
          const inode = Number(target.slice('socket:['.length, -1));
          let command = '?';
          try {
            command = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
          } catch {
            /* gone */
          }
          const list = owners.get(inode) ?? [];
          if (!list.some((owner) => owner.pid === Number(entry))) {
            list.push({ pid: Number(entry), command });
          }
          owners.set(inode, list);
        }
      }
      return Promise.resolve(owners);
    },
    async natRules() {
      const rules: NatRules = { sources: [], unavailable: [] };
      const tools: [string, string[]][] = [
        ['iptables-save', ['iptables-save', '-t', 'nat']],
        ['ip6tables-save', ['ip6tables-save', '-t', 'nat']],
        ['nft', ['nft', 'list', 'ruleset']],
      ];
      for (const [tool, argv] of tools) {
        const result = await run(inNetns(argv));
        if (result.code === 0) rules.sources.push({ tool, text: result.stdout });
        else {
          const why =
            result.error ?? (result.stderr.trim().split('\n')[0] || `exit status ${result.code}`);
          rules.unavailable.push(`${tool}: ${why}`);
        }
      }
      return rules;
    },
    driverInfo: (ifname) =>
      getDriverInfo(ifname, options.netns === undefined ? {} : { netns: options.netns }),
    features: async (ifname) =>
      (await getFeatures(ifname, options.netns === undefined ? {} : { netns: options.netns }))
        .features,
    checksumErrors: () =>
      getChecksumErrors(options.netns === undefined ? {} : { netns: options.netns }),
    async addrAssignType(ifname, ifindex) {
      const base = `/sys/class/net/${ifname}`;
      const files = await readFiles([`${base}/ifindex`, `${base}/addr_assign_type`], true);
      if (files.get(`${base}/ifindex`)?.trim() !== String(ifindex)) return null;
      const value = Number(files.get(`${base}/addr_assign_type`)?.trim());
      return Number.isInteger(value) ? value : null;
    },
    probePaths(device, addresses) {
      return binding.probePaths(
        {
          ...(netnsPath === undefined ? {} : { netns: netnsPath, netnsLabel: options.netns }),
          device,
          timeoutMs: PROBE_TIMEOUT_MS,
          udpPort: PROBE_PORT,
          tcpPort: PROBE_PORT,
          echoId: process.pid & 0xffff,
        },
        addresses,
      );
    },
    async interfaceWithAddress(address) {
      const result = await run(inNetns(['ip', '-j', 'address', 'show', 'to', address]));
      if (result.code !== 0) return null;
      try {
        const parsed = JSON.parse(result.stdout) as { ifname?: string }[];
        return parsed.find((entry) => entry.ifname !== undefined)?.ifname ?? null;
      } catch {
        return null;
      }
    },
  };
}
