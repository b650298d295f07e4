/**
 * The real systemd-udevd 252 as the oracle for the doctor's .link reading:
 * random configuration trees (seeded: a failure names its seed) of .link
 * files, drop-ins, masks, links and odd entries across the network
 * directories, each judged by `udevadm test-builtin net_setup_link` on a new
 * VXLAN device in a test netns, with the tree bind-mounted over the system's
 * directories in a private mount namespace (its own /run, /dev and
 * /etc/machine-id). The builtin applies what it chooses, so the device's
 * addr_assign_type afterwards says whether the MAC was rewritten.
 */
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { arch, hostname, release } from 'node:os';
import { dirname, join } from 'node:path';

import { FsRoot } from '../../lib/core/fsroot';
import {
  evaluateLinkFiles,
  loadLinkFiles,
  macEffect,
  type DeviceFacts,
  type HostFacts,
} from '../../lib/udev/link-files';

import { registerSyncCleanup, tempDirPrefix, type Netns } from './netns';
import { prng } from './prng';
import { randomMachineId } from './udevd';

export const DEFAULT_LINK = '/usr/lib/systemd/network/99-default.link';

/** The directories a tree fills (/lib is a link to usr/lib, as on Debian 12). */
export const TREE_DIRS = [
  '/etc/systemd/network',
  '/run/systemd/network',
  '/usr/local/lib/systemd/network',
  '/usr/lib/systemd/network',
] as const;

export type TreeEntry =
  { kind: 'file'; content: string } | { kind: 'symlink'; target: string } | { kind: 'dir' };

export type Tree = Record<string, TreeEntry>;

const ORIGINAL_NAMES = [
  'flannel*',
  'flannel.1',
  'flannel.?',
  '"flannel*"',
  "'flannel.1'",
  'flannel* eth0',
  '!flannel*',
  '!eth*',
  'eth*',
  '*',
  'fl*',
  '%',
  'flannel%1',
  '..',
  '123',
  'flännel*',
  'abcdefghijklmnopq',
  'fla:nnel*',
  'flannel\\.1',
  'flannel.1 \\',
  '!',
  '"flannel.1 eth0"',
  '',
];
const MATCH_LINES = [
  ...ORIGINAL_NAMES.map((words) => `OriginalName=${words}`),
  'Type=vxlan',
  'Type=ether',
  'Type=!vxlan',
  'Kind=vxlan',
  'Kind=veth',
  'Kind=!veth',
  'Driver=vxlan',
  'Driver=e1000',
  'Driver=vxl*',
  'MACAddress=02:00:00:00:00:99',
  'MACAddress=zz',
  'PermanentMACAddress=02:00:00:00:00:98',
  'Path=pci-*',
  'Architecture=x86-64',
  'Architecture=arm64',
  'Architecture=!arm64',
  'KernelCommandLine=nosuchparam',
  'KernelCommandLine=!nosuchparam',
  'KernelVersion=>=3.0',
  'KernelVersion=<3.0',
  // The version as the next word (systemd allows it in the first term only), several terms, globs.
  'KernelVersion=>= 3.0',
  'KernelVersion=>=3.0 <999',
  'KernelVersion=>= 3.0 <999',
  'KernelVersion=<999 >= 3.0',
  'KernelVersion=!=3.0',
  'KernelVersion=*.*',
  'KernelVersion=2.*',
  `KernelVersion=${release()}`,
  'Architecture=native',
  'Architecture=!native',
  // A backslash in a glob.
  'Driver=vxl\\*',
  'Kind=vx\\lan',
  'Type=vxla\\n',
  'Driver=vxla?',
  'Host=no-such-host',
  'Host=!no-such-host',
  'Name=flannel*',
  'Bogus=1',
  'Type="vxlan"',
  "Kind='vxlan' veth",
  'Driver=!"vxlan"',
  '# OriginalName=flannel*',
  '; Type=vxlan',
  'OriginalName=flannel* \\\neth0',
  'OriginalName = flannel*',
];
const LINK_LINES = [
  'MACAddressPolicy=persistent',
  'MACAddressPolicy=random',
  'MACAddressPolicy=none',
  'MACAddressPolicy=',
  'MACAddressPolicy=bogus',
  'MACAddress=02:00:00:00:00:42',
  'MACAddress=zz',
  'MACAddress=',
  'NamePolicy=keep',
  'MACAddressPolicy=persistent ',
  'MACAddressPolicy="none"',
  'MACAddress=02-00-00-00-00-43',
  'MACAddress=0200.0000.0044',
];
const NAMES = ['00-a', '10-flannel', '50-x', '80-y', '99-default'];

function pick<T>(random: () => number, items: readonly T[]): T {
  const item = items[Math.floor(random() * items.length)];
  if (item === undefined) throw new Error('pick from an empty list');
  return item;
}

function section(
  random: () => number,
  name: string,
  lines: readonly string[],
  max: number,
): string {
  const count = Math.floor(random() * (max + 1));
  const body = Array.from({ length: count }, () => pick(random, lines));
  return `[${name}]\n${body.join('\n')}\n`;
}

/** The machine-id udev runs with for the tree of `seed` (its Host= lines name it). */
export function machineIdFor(seed: number): string {
  const random = prng(seed ^ 0x5eed);
  return Array.from({ length: 32 }, () => Math.floor(random() * 16).toString(16)).join('');
}

/** Host= lines for a machine-id: as 32 digits, as a UUID, negated, and another machine's. */
function hostLines(machineId: string): string[] {
  const uuid = (id: string): string =>
    [id.slice(0, 8), id.slice(8, 12), id.slice(12, 16), id.slice(16, 20), id.slice(20)].join('-');
  const other = `${machineId.slice(1)}${machineId[0] === 'a' ? 'b' : 'a'}`;
  return [
    `Host=${machineId}`,
    `Host=${uuid(machineId)}`,
    `Host=${uuid(machineId).toUpperCase()}`,
    `Host=!${uuid(machineId)}`,
    `Host=${uuid(other)}`,
  ];
}

/** A random tree for `seed` (the system's 99-default.link is always in /usr/lib). */
export function randomTree(seed: number): Tree {
  const random = prng(seed);
  const matchLines = [...MATCH_LINES, ...hostLines(machineIdFor(seed))];
  const tree: Tree = {};
  const files = 1 + Math.floor(random() * 5);
  for (let i = 0; i < files; i += 1) {
    const path = `${pick(random, TREE_DIRS)}/${pick(random, NAMES)}.link`;
    const roll = random();
    if (roll < 0.7) {
      const content =
        random() < 0.9
          ? `${section(random, 'Match', matchLines, 3)}\n${section(random, 'Link', LINK_LINES, 2)}`
          : `${section(random, 'Link', LINK_LINES, 2)}`;
      tree[path] = { kind: 'file', content };
    } else if (roll < 0.78) {
      tree[path] = { kind: 'file', content: '' };
    } else if (roll < 0.85) {
      tree[path] = { kind: 'symlink', target: '/dev/null' };
    } else if (roll < 0.9) {
      tree[path] = { kind: 'symlink', target: '/etc/systemd/network/no-such-file' };
    } else if (roll < 0.95) {
      tree[path] = { kind: 'dir' };
    } else {
      tree[path] = { kind: 'symlink', target: DEFAULT_LINK };
    }
  }
  const dropins = Math.floor(random() * 3);
  for (let i = 0; i < dropins; i += 1) {
    const dir = `${pick(random, TREE_DIRS)}/${pick(random, NAMES)}.link.d`;
    const path = `${dir}/${pick(random, ['10-a', '20-b'])}.conf`;
    const roll = random();
    tree[path] =
      roll < 0.75
        ? {
            kind: 'file',
            content:
              random() < 0.7
                ? section(random, 'Link', LINK_LINES, 2)
                : section(random, 'Match', matchLines, 2),
          }
        : roll < 0.85
          ? { kind: 'file', content: '' }
          : roll < 0.9
            ? { kind: 'symlink', target: '/dev/null' }
            : roll < 0.95
              ? { kind: 'symlink', target: '/etc/systemd/network/no-such-file' }
              : { kind: 'dir' };
  }
  return tree;
}

/** Writes `tree` under a new folder (with 99-default.link and /lib -> usr/lib). */
export function writeTree(tree: Tree): { root: string; dispose: () => void } {
  const root = mkdtempSync(tempDirPrefix('ltree'));
  const unregister = registerSyncCleanup(() => rmSync(root, { recursive: true, force: true }));
  for (const dir of TREE_DIRS) mkdirSync(join(root, dir), { recursive: true });
  symlinkSync('usr/lib', join(root, 'lib'));
  copyFileSync(DEFAULT_LINK, join(root, DEFAULT_LINK));
  for (const [path, entry] of Object.entries(tree)) {
    const real = join(root, path);
    mkdirSync(dirname(real), { recursive: true });
    rmSync(real, { recursive: true, force: true });
    if (entry.kind === 'file') writeFileSync(real, entry.content);
    else if (entry.kind === 'dir') mkdirSync(real);
    // Targets are system paths: under the bind mounts udev resolves them into the tree, as
    // the doctor resolves them inside its root.
    else symlinkSync(entry.target, real);
  }
  return {
    root,
    dispose: () => {
      rmSync(root, { recursive: true, force: true });
      unregister();
    },
  };
}

export interface UdevVerdict {
  /** The file udev applied (system path), or null. */
  applied: string | null;
  /** Whether it rewrote the new device's MAC. */
  rewrites: boolean;
  log: string;
}

const SCRIPT = `set -eu
r="$1"
mount -t tmpfs -o mode=0755,size=4m fgt-run /run
mkdir -p /run/udev /run/systemd/network
mount -t tmpfs -o mode=0755,size=1m fgt-dev /dev
mknod -m 666 /dev/null c 1 3
printf '%s\\n' "$2" > /run/machine-id
mount --bind /run/machine-id /etc/machine-id
mount -t tmpfs -o mode=0755,size=1m fgt-local /usr/local/lib
mkdir -p /usr/local/lib/systemd/network
for p in /etc/systemd/network /usr/local/lib/systemd/network /usr/lib/systemd/network; do
  mount --bind "$r$p" "$p"
done
cp -a "$r/run/systemd/network/." /run/systemd/network/
ip link add flannel.1 type vxlan id 1 dstport 8472 nolearning
SYSTEMD_LOG_LEVEL=debug udevadm test-builtin net_setup_link /sys/class/net/flannel.1 2>&1 || true
echo "addr_assign_type=$(cat /sys/class/net/flannel.1/addr_assign_type)"
ip link del flannel.1
`;

/** What udev 252 does with `root`'s tree to a new flannel.1 in `ns`. */
export async function udevVerdict(
  ns: Netns,
  root: string,
  machineId: string = randomMachineId(),
): Promise<UdevVerdict> {
  const { stdout } = await ns.run(
    ['unshare', '-m', '--propagation', 'private', 'sh', '-c', SCRIPT, 'fgt-link', root, machineId],
    { timeoutMs: 20_000 },
  );
  const applied = /: Config file (\S+) is applied/.exec(stdout)?.[1] ?? null;
  const type = /^addr_assign_type=(\d)/m.exec(stdout)?.[1];
  if (type === undefined) throw new Error(`no verdict from udevadm:\n${stdout}`);
  // The tree is bind-mounted: udev names the system paths.
  return { applied, rewrites: type === '3', log: stdout };
}

const ARCH: Record<string, string> = { x64: 'x86-64', arm64: 'arm64' };

/** This machine as [Match] conditions see it (with udev's machine-id when given). */
export function hostFacts(machineId: string | null = null): HostFacts {
  return {
    hostname: hostname(),
    machineId,
    kernelRelease: release(),
    architecture: ARCH[arch()] ?? null,
    kernelCommandLine: readFileSync('/proc/cmdline', 'utf8').trim(),
  };
}

/** A new flannel.1 as udev sees it at its add event. */
export const FLANNEL_1: DeviceFacts = {
  name: 'flannel.1',
  kind: 'vxlan',
  type: 'vxlan',
  driver: 'vxlan',
  path: null,
  mac: null,
};

export interface Comparison {
  seed: number;
  agreed: boolean;
  warned: boolean;
  detail: string;
}

/** One tree: the doctor's reading against udev's. */
export async function compareTree(
  ns: Netns,
  seed: number,
  tree: Tree = randomTree(seed),
): Promise<Comparison> {
  const { root, dispose } = writeTree(tree);
  try {
    const machineId = machineIdFor(seed);
    const evaluation = evaluateLinkFiles(
      loadLinkFiles(new FsRoot(root)),
      FLANNEL_1,
      hostFacts(machineId),
    );
    const udev = await udevVerdict(ns, root, machineId);
    const predicted = {
      applied: evaluation.applied?.path ?? null,
      rewrites: evaluation.applied ? macEffect(evaluation.applied).rewrites : false,
    };
    const warned = evaluation.possible.length > 0;
    const candidates = [
      ...evaluation.possible,
      ...(evaluation.applied ? [evaluation.applied] : []),
    ];
    const agreed = warned
      ? udev.applied === null
        ? evaluation.applied === null
        : candidates.some((file) => file.path === udev.applied)
      : predicted.applied === udev.applied && predicted.rewrites === udev.rewrites;
    const detail = `seed ${seed}: doctor ${JSON.stringify(predicted)}${warned ? ` (may apply: ${evaluation.possible.map((f) => f.path).join(', ')})` : ''}, udev ${JSON.stringify({ applied: udev.applied, rewrites: udev.rewrites })}\ntree ${JSON.stringify(tree, null, 1)}`;
    return { seed, agreed, warned, detail };
  } finally {
    dispose();
  }
}
