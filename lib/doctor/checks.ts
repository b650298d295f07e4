/**
 * The doctor's checks. Each returns a verdict (ok / warn / fail), the evidence it is based on,
 * and the fix in one sentence. Configuration checks read files under the root; device checks
 * read the namespace through the one-shot API and the system probes.
 */
import { isIP } from 'node:net';

import { NET_ADDR_RANDOM } from '../core/constants';
import { DEFAULT_INTERFACES } from '../core/defaults';
import { fixedOffloadPolicy } from '../core/options';
import { getFeatures, getLinks, getNeighbours } from '../core/oneshot';
import type { PeerExpectation } from '../ensure/ensure';
import type { DesiredMacSource } from '../guard/sources';
import { monotonicMs } from '../core/clock';
import type { ChecksumErrorCounters, FeatureState, LinkInfo, NeighbourInfo } from '../core/types';
import { compileInterfaceGlob } from '../core/validate';
import { FsRoot } from '../core/fsroot';
import { UdevView } from '../udev/view';
import type { PathAnswer } from '../guard/events';
import { checksumErrorRise, describeChecksumCounts } from '../guard/checksum-errors';
import { judgePaths } from '../guard/offload-auto';
import { attributeWriter, type WriterAttribution } from '../udev/writer';
import {
  compareVersions,
  evaluateLinkFiles,
  loadLinkFiles,
  macEffect,
  type DeviceFacts,
  type HostFacts,
  type LinkEvaluation,
  type LinkFile,
} from '../udev/link-files';
import {
  loadNetworkManager,
  nmUnmanaged,
  profileBinding,
  setsMac,
  type NmConfig,
  type NmProfileKey,
} from './networkmanager';
import { systemProbe, type SystemProbe } from './system';
import { loadRules, rulesTouching, type RuleFinding, type UdevRule } from './udev-rules';

export type Verdict = 'ok' | 'warn' | 'fail';

export const CHECK_IDS = [
  'link-files',
  'udev-rules',
  'networkmanager',
  'vtep',
  'vtep-mac',
  'addr-assign-type',
  'neighbours',
  'offload',
  'offload-probe',
  'underlay-driver',
  'random-fully',
  'vxlan-port',
  'checksum-errors',
] as const;
export type CheckId = (typeof CHECK_IDS)[number];

export interface CheckResult {
  id: CheckId;
  /** The device the check is about (null for node-wide checks). */
  device: string | null;
  verdict: Verdict;
  /** One line: what was found. */
  summary: string;
  /** What the verdict is based on. */
  evidence: string[];
  /** One sentence; null when the verdict is ok. */
  fix: string | null;
}

export interface DoctorInput {
  /** Configuration files are read under this directory (default '/'). */
  root?: string;
  /** Network namespace by `ip netns` name or path; the process's own when omitted. */
  netns?: string;
  /** Interface globs (default flannel.*, flannel-v6.*). */
  interfaces?: readonly string[];
  /** The published MAC per device (like --mac); wins over `source`. */
  mac?: Readonly<Record<string, string>>;
  /** Where the published MAC comes from otherwise (e.g. the Kubernetes node annotation). */
  source?: DesiredMacSource;
  /** The other nodes' published VTEPs, or a function that fetches them. */
  peers?: readonly PeerExpectation[] | (() => Promise<readonly PeerExpectation[]>);
  /** Offload policy (default tx-checksum-ip-generic off); 'none' checks nothing. */
  offload?: Readonly<Record<string, boolean>> | 'none';
  /** The kernel release to judge (default: the running kernel's). */
  kernelRelease?: string;
  /** Replaces single system probes (tests, or callers that know better). */
  probe?: Partial<SystemProbe>;
}

/**
 * The commands a fix sentence quotes, aimed at what the doctor examined: a line pasted from a
 * doctor run with --netns (or --root) must never act on the host's namespace (or /etc) instead.
 */
export interface FixCommands {
  /** `ip ARGS` in the namespace. */
  ip(args: string): string;
  /** `ethtool ARGS` in the namespace. */
  ethtool(args: string): string;
  /** `flannel-guard doctor|watch ARGS` for the namespace. */
  guard(command: 'doctor' | 'watch', args?: string): string;
}

/** A word as a shell reads it back: as is when plain, else single-quoted. */
function shellWord(word: string): string {
  return /^[\w./:@%+=-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

export function fixCommands(netns: string | undefined, root = '/'): FixCommands {
  const rootFlag = root === '/' ? '' : ` --root ${shellWord(root)}`;
  const guard = (command: string, netnsFlag: string, args?: string): string =>
    `flannel-guard ${command}${command === 'doctor' ? rootFlag : ''}${netnsFlag}${args === undefined ? '' : ` ${args}`}`;
  if (netns === undefined) {
    return {
      ip: (args) => `ip ${args}`,
      ethtool: (args) => `ethtool ${args}`,
      guard: (command, args) => guard(command, '', args),
    };
  }
  const ns = shellWord(netns);
  // `ip -n` and `ip netns exec` take a name; a path (/proc/PID/ns/net) needs nsenter.
  const inside = netns.includes('/') ? `nsenter --net=${ns}` : `ip netns exec ${ns}`;
  return {
    ip: (args) => (netns.includes('/') ? `${inside} ip ${args}` : `ip -n ${ns} ${args}`),
    ethtool: (args) => `${inside} ethtool ${args}`,
    guard: (command, args) => guard(command, ` --netns ${ns}`, args),
  };
}

/** A VXLAN device found in the namespace, with what the checks need. */
export interface DeviceState {
  link: LinkInfo;
  /** The commands its fix sentences quote (in its namespace). */
  fix: FixCommands;
  addrAssignType: number | null;
  publishedMac: string | null;
  publishedBy: string | null;
  peers: PeerExpectation[];
  neighbours: NeighbourInfo[];
  features: FeatureState[] | null;
  facts: DeviceFacts;
  /** Who wrote the device's MAC, when it is not the published one (null otherwise). */
  writer: WriterAttribution | null;
}

export interface Gathered {
  fs: FsRoot;
  /** The commands fix sentences quote (for the namespace and root examined). */
  fix: FixCommands;
  probe: SystemProbe;
  host: HostFacts;
  kernel: string;
  globs: string[];
  links: LinkInfo[];
  devices: DeviceState[];
  /** Devices the configuration checks are about (the found ones, or the names flannel uses). */
  subjects: DeviceFacts[];
  linkFiles: LinkFile[];
  rules: UdevRule[];
  nm: NmConfig;
  offload: Readonly<Record<string, boolean>>;
  peersGiven: boolean;
  /** The checksum-error counters when the doctor began (read again at the end), or why not. */
  checksumErrorsAtStart: { counters: ChecksumErrorCounters; at: number } | Error;
}

function vxlanFacts(name: string, link?: LinkInfo): DeviceFacts {
  const kind = link ? link.kind || null : 'vxlan';
  return {
    name,
    kind,
    type: kind === 'vxlan' ? 'vxlan' : 'ether',
    driver: kind,
    path: null,
    mac: null,
  };
}

function once<T>(read: () => Promise<T>): () => Promise<T> {
  let promise: Promise<T> | undefined;
  return () => (promise ??= read());
}

/** The name a glob would give flannel's device: flannel.* -> flannel.1. */
function exampleName(glob: string): string {
  return glob.replace(/[*?]/g, '1');
}

function peersFor(
  device: LinkInfo,
  all: readonly PeerExpectation[],
  count: number,
): PeerExpectation[] {
  if (count <= 1) return [...all];
  const local = device.vxlan?.local ?? null;
  const v6 = local !== null ? isIP(local) === 6 : device.name.includes('v6');
  return all.filter((peer) => (isIP(peer.vtepIp) === 6) === v6);
}

/** Reads everything the checks look at. */
export async function gather(input: DoctorInput): Promise<Gathered> {
  const fs = new FsRoot(input.root ?? '/');
  const netnsOption = input.netns === undefined ? {} : { netns: input.netns };
  const base: SystemProbe = {
    ...systemProbe({
      fs,
      ...netnsOption,
      ...(input.kernelRelease === undefined ? {} : { kernelRelease: input.kernelRelease }),
    }),
    ...input.probe,
  };
  // Node-wide facts: read once however many devices there are.
  const probe: SystemProbe = {
    ...base,
    natRules: once(() => base.natRules()),
    udpSockets: once(() => base.udpSockets()),
  };
  const host = probe.host();
  const linkFiles = loadLinkFiles(fs);
  const udev = new UdevView(fs, host, linkFiles);
  const globs = [...(input.interfaces ?? DEFAULT_INTERFACES)];
  const compiled = globs.map((glob) => compileInterfaceGlob(glob));
  const checksumErrorsAtStart = await readChecksumErrors(probe);
  const links = await getLinks(netnsOption);
  const managed = links.filter(
    (link) => !link.loopback && compiled.some((glob) => glob.matches(link.name)),
  );
  const peerList = typeof input.peers === 'function' ? await input.peers() : (input.peers ?? []);
  const neighbours = managed.length > 0 ? await getNeighbours(netnsOption) : [];
  const offload = fixedOffloadPolicy(input.offload);
  if (managed.length > 0) {
    // Slow node-wide reads (child processes) run while the devices are read.
    void probe.natRules().catch(() => undefined);
    void probe.udpSockets().catch(() => undefined);
  }
  const commands = fixCommands(input.netns, input.root);
  const devices: DeviceState[] = await Promise.all(
    managed.map(async (link): Promise<DeviceState> => {
      const explicit = input.mac?.[link.name];
      const fromSource = explicit === undefined ? input.source?.desiredMac(link.name) : undefined;
      const [features, driver, addrAssignType] = await Promise.all([
        getFeatures(link.name, netnsOption).then(
          (table) => table.features,
          () => null,
        ),
        probe.driverInfo(link.name).then(
          (info) => info.driver || link.kind || null,
          () => link.kind || null,
        ),
        link.addrAssignType ?? probe.addrAssignType(link.name, link.ifindex),
      ]);
      const publishedMac = explicit ?? fromSource ?? null;
      const rewritten = publishedMac !== null && link.mac !== publishedMac;
      return {
        link,
        fix: commands,
        addrAssignType,
        writer: rewritten
          ? attributeWriter({
              ...udev.expect(link.name, link.ifindex, link.mac),
              mac: link.mac,
              msSinceCreation: null,
              addrAssignType,
            })
          : null,
        publishedMac,
        publishedBy:
          explicit !== undefined
            ? '--mac'
            : fromSource !== undefined
              ? (input.source?.name ?? 'source')
              : null,
        peers: peersFor(link, peerList, managed.length),
        neighbours: neighbours.filter((n) => n.ifindex === link.ifindex),
        features,
        facts: { ...vxlanFacts(link.name, link), driver },
      };
    }),
  );
  const subjects =
    devices.length > 0
      ? devices.map((device) => device.facts)
      : [...new Set(globs.map(exampleName))].map((name) => vxlanFacts(name));
  return {
    fs,
    fix: commands,
    probe,
    host,
    kernel: probe.kernelRelease(),
    globs,
    links,
    devices,
    subjects,
    linkFiles,
    rules: loadRules(fs),
    nm: loadNetworkManager(fs),
    offload,
    peersGiven: peerList.length > 0,
    checksumErrorsAtStart,
  };
}

async function readChecksumErrors(
  probe: SystemProbe,
): Promise<{ counters: ChecksumErrorCounters; at: number } | Error> {
  try {
    return { counters: await probe.checksumErrors(), at: monotonicMs() };
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

// --- configuration ------------------------------------------------------------------------

function describeFile(file: LinkFile): string {
  const extras = [
    ...(file.dropins.length > 0 ? [`drop-ins ${file.dropins.join(', ')}`] : []),
    ...(file.shadows.length > 0 ? [`replaces ${file.shadows.join(', ')}`] : []),
  ];
  return `${file.path}${extras.length > 0 ? ` (${extras.join('; ')})` : ''}`;
}

/** The `.link` file that makes udev leave flannel's devices alone. */
export function flannelLinkFileContent(globs: readonly string[]): string {
  const defaults =
    globs.length === DEFAULT_INTERFACES.length &&
    DEFAULT_INTERFACES.every((glob) => globs.includes(glob));
  const names = defaults ? 'flannel*' : globs.join(' ');
  return `# Written by flannel-guard doctor --fix: udev must not rewrite the MAC flannel publishes.\n[Match]\nOriginalName=${names}\n\n[Link]\nMACAddressPolicy=none\n`;
}

export function checkLinkFiles(
  evaluation: LinkEvaluation,
  fix: FixCommands = fixCommands(undefined),
): CheckResult {
  const device = evaluation.device.name;
  const evidence: string[] = [];
  for (const { file, match } of evaluation.files) {
    if (file.masked) {
      evidence.push(
        `${file.path}: masked (empty or /dev/null)${file.shadows.length > 0 ? `, hides ${file.shadows.join(', ')}` : ''}`,
      );
      continue;
    }
    for (const warning of file.warnings) evidence.push(warning);
    if (match.result === 'no') continue;
    const effect = macEffect(file);
    evidence.push(
      `${describeFile(file)}: ${match.result === 'yes' ? 'matches' : `may match (${match.reasons.join(', ')})`} ${device}; ${effect.describe}`,
    );
  }
  const applied = evaluation.applied;
  const risky = evaluation.possible.filter((file) => macEffect(file).rewrites);
  const fixSentence = `Add /etc/systemd/network/10-flannel.link with [Match] OriginalName=flannel* and [Link] MACAddressPolicy=none, named to sort before ${applied ? applied.name : 'the matching files'} (${fix.guard('doctor', '--fix')} writes it), then run udevadm control --reload.`;
  if (applied && macEffect(applied).rewrites) {
    return {
      id: 'link-files',
      device,
      verdict: 'fail',
      summary: `${applied.path} applies to ${device}: ${macEffect(applied).describe} (udev rewrites the MAC flannel published)`,
      evidence,
      fix: fixSentence,
    };
  }
  if (risky.length > 0) {
    return {
      id: 'link-files',
      device,
      verdict: 'warn',
      summary: `${risky.map((f) => f.path).join(', ')} may apply to ${device} and would rewrite its MAC`,
      evidence,
      fix: fixSentence,
    };
  }
  return {
    id: 'link-files',
    device,
    verdict: 'ok',
    summary: applied
      ? `${applied.path} applies to ${device}: ${macEffect(applied).describe}`
      : `no .link file matches ${device}: udev leaves its MAC alone`,
    evidence,
    fix: null,
  };
}

function describeRule(finding: RuleFinding): string {
  return `${finding.rule.file}:${finding.rule.line}: ${finding.rule.text} [${finding.effects.join(', ')}${finding.match === 'unknown' ? '; match not certain' : ''}]`;
}

export function checkUdevRules(device: DeviceFacts, findings: RuleFinding[]): CheckResult {
  const macChanging = findings.filter(
    (f) => f.effects.includes('sets-mac') || f.effects.includes('runs-mac-change'),
  );
  const others = findings.filter(
    (f) =>
      !macChanging.includes(f) &&
      f.effects.some((e) => !['nm-unmanaged', 'applies-link-files', 'other'].includes(e)),
  );
  const evidence = findings.map(describeRule);
  const certain = macChanging.filter((f) => f.match === 'yes');
  if (macChanging.length > 0) {
    return {
      id: 'udev-rules',
      device: device.name,
      verdict: certain.length > 0 ? 'fail' : 'warn',
      summary: `${macChanging.length} udev rule(s) ${certain.length > 0 ? 'change' : 'may change'} the MAC of ${device.name}`,
      evidence,
      fix: `Remove or narrow ${macChanging.map((f) => `${f.rule.file}:${f.rule.line}`).join(', ')} so that it does not set the address of flannel devices (KERNEL!="flannel*").`,
    };
  }
  if (others.length > 0) {
    return {
      id: 'udev-rules',
      device: device.name,
      verdict: 'warn',
      summary: `${others.length} udev rule(s) act on ${device.name}`,
      evidence,
      fix: `Check that ${others.map((f) => `${f.rule.file}:${f.rule.line}`).join(', ')} does not rename ${device.name} or change its offloads against the policy.`,
    };
  }
  return {
    id: 'udev-rules',
    device: device.name,
    verdict: 'ok',
    summary: `no udev rule changes ${device.name}`,
    evidence,
    fix: null,
  };
}

/** The drop-in `--fix` writes: the guard's devices added to `[keyfile] unmanaged-devices`. */
export function networkManagerDropIn(globs: readonly string[]): {
  path: string;
  setting: string;
  content: string;
} {
  const setting = `[keyfile] unmanaged-devices+=${globs.map((glob) => `interface-name:${glob}`).join(';')}`;
  return {
    // Read after every other conf.d file, and += keeps the devices listed before unmanaged.
    path: '/etc/NetworkManager/conf.d/99-flannel-guard.conf',
    setting,
    content: `# Written by flannel-guard doctor --fix: NetworkManager must not manage (or re-address) flannel's VXLAN devices.\n${setting.replace('] ', ']\n')}\n`,
  };
}

const profileKey = (key: NmProfileKey): string =>
  `${key.file}:${key.line} [${key.section}] ${key.key}=${key.value}`;

export function checkNetworkManager(
  nm: NmConfig,
  device: DeviceFacts,
  findings: RuleFinding[],
  globs: readonly string[] = DEFAULT_INTERFACES,
): CheckResult {
  if (!nm.installed) {
    return {
      id: 'networkmanager',
      device: device.name,
      verdict: 'ok',
      summary: 'NetworkManager is not installed',
      evidence: [],
      fix: null,
    };
  }
  const udev = findings
    .filter((f) => f.effects.includes('nm-unmanaged') && f.match === 'yes')
    .map((f) => `${f.rule.file}:${f.rule.line} sets NM_UNMANAGED=1`);
  const verdict = nmUnmanaged(nm, device, udev);
  const bound = nm.profiles.flatMap((profile) => {
    const binding = profileBinding(profile, device);
    return binding ? [{ profile, binding }] : [];
  });
  const profileEvidence = bound.map(
    ({ profile, binding }) =>
      `profile ${profile.id ?? profile.file} (${profile.file}) is for ${device.name}: ${binding.map(profileKey).join(', ')}${setsMac(profile.clonedMacAddress) ? `; sets its MAC: ${profileKey(profile.clonedMacAddress)}` : ''}${profile.autoconnect ? '' : '; autoconnect=false'}`,
  );
  const evidence = [
    `configuration read: ${nm.files.length > 0 ? nm.files.join(', ') : 'none'}`,
    ...(nm.disabled.length > 0
      ? [`disabled by [.config] enable=false: ${nm.disabled.join(', ')}`]
      : []),
    ...verdict.by,
    ...profileEvidence,
  ];
  if (verdict.unmanaged) {
    return {
      id: 'networkmanager',
      device: device.name,
      verdict: 'ok',
      summary:
        bound.length > 0
          ? `NetworkManager leaves ${device.name} unmanaged: its profiles for it are never activated`
          : `NetworkManager leaves ${device.name} unmanaged`,
      evidence,
      fix: null,
    };
  }
  const dropIn = networkManagerDropIn(globs);
  const fix = `Add ${dropIn.path} with ${dropIn.setting} (doctor --fix writes it) and run nmcli general reload conf.`;
  const rewriting = bound.filter(({ profile }) => setsMac(profile.clonedMacAddress));
  const first = rewriting[0];
  if (first) {
    const key = first.profile.clonedMacAddress;
    return {
      id: 'networkmanager',
      device: device.name,
      verdict: 'fail',
      summary: `NetworkManager manages ${device.name} and ${rewriting.length === 1 ? 'a profile sets' : `${rewriting.length} profiles set`} its MAC (${key ? profileKey(key) : ''})`,
      evidence,
      fix: `${fix} The profile${rewriting.length === 1 ? '' : 's'} can then stay; or delete ${rewriting.map(({ profile }) => profile.file).join(', ')}.`,
    };
  }
  return {
    id: 'networkmanager',
    device: device.name,
    verdict: 'warn',
    summary:
      bound.length > 0
        ? `NetworkManager manages ${device.name} and has a profile for it (${bound.map(({ profile }) => profile.file).join(', ')})`
        : `NetworkManager is installed and does not mark ${device.name} unmanaged`,
    evidence,
    fix,
  };
}

// --- devices ------------------------------------------------------------------------------

export function checkVtep(gathered: Gathered): CheckResult[] {
  if (gathered.devices.length === 0) {
    return [
      {
        id: 'vtep',
        device: null,
        verdict: 'warn',
        summary: `no device matching ${gathered.globs.join(', ')}`,
        evidence: [`links: ${gathered.links.map((l) => l.name).join(', ')}`],
        fix: 'Start flannel (its vxlan backend creates flannel.1), or name the device with --iface.',
      },
    ];
  }
  return gathered.devices.map(({ link, fix }) => {
    const vx = link.vxlan;
    const evidence = [
      `kind ${link.kind || 'none'}, ${link.up ? 'up' : 'down'}, mtu ${link.mtu ?? '?'}`,
      ...(vx
        ? [
            `vni ${vx.vni ?? '?'}, port ${vx.port ?? '?'}, local ${vx.local ?? 'none'}, underlay ifindex ${vx.underlayIfindex ?? 'none'}, learning ${vx.learning === null ? '?' : vx.learning ? 'on' : 'off'}`,
          ]
        : []),
    ];
    if (link.kind !== 'vxlan') {
      return {
        id: 'vtep',
        device: link.name,
        verdict: 'fail',
        summary: `${link.name} is not a VXLAN device (kind ${link.kind || 'none'})`,
        evidence,
        fix: `Remove ${link.name} or narrow --iface: flannel's vxlan backend creates a vxlan device under this name.`,
      } satisfies CheckResult;
    }
    if (!link.up) {
      return {
        id: 'vtep',
        device: link.name,
        verdict: 'warn',
        summary: `${link.name} is down`,
        evidence,
        fix: `Bring it up (${fix.ip(`link set ${link.name} up`)}) or restart flannel; if that fails with "Address already in use", see the vxlan-port check.`,
      } satisfies CheckResult;
    }
    return {
      id: 'vtep',
      device: link.name,
      verdict: 'ok',
      summary: `${link.name}: VXLAN, up`,
      evidence,
      fix: null,
    } satisfies CheckResult;
  });
}

export function checkMac(device: DeviceState): CheckResult {
  const { link } = device;
  const evidence = [
    `device MAC ${link.mac ?? 'none'}`,
    `published MAC ${device.publishedMac ?? 'unknown'}${device.publishedBy ? ` (${device.publishedBy})` : ''}`,
  ];
  if (device.publishedMac === null) {
    return {
      id: 'vtep-mac',
      device: link.name,
      verdict: 'warn',
      summary: `the MAC ${link.name} published is unknown: not compared`,
      evidence,
      fix: `Pass --mac ${link.name}=MAC with the VtepMAC of the node annotation flannel.alpha.coreos.com/backend-data.`,
    };
  }
  if (link.mac !== device.publishedMac) {
    if (device.writer) evidence.push(`written by ${device.writer.writer}: ${device.writer.detail}`);
    return {
      id: 'vtep-mac',
      device: link.name,
      verdict: 'fail',
      summary: `${link.name} has MAC ${link.mac ?? 'none'}, but the other nodes were told ${device.publishedMac}: cross-node traffic is dropped`,
      evidence,
      fix: `Set it back and restore the neighbour entries the change flushes (${device.fix.guard('doctor', `--fix --mac ${link.name}=${device.publishedMac}`)}), and keep it there with ${device.fix.guard('watch')}.`,
    };
  }
  return {
    id: 'vtep-mac',
    device: link.name,
    verdict: 'ok',
    summary: `${link.name} has the published MAC ${link.mac}`,
    evidence,
    fix: null,
  };
}

const ASSIGN_TYPES = ['permanent', 'random', 'stolen', 'set by userspace'];

export function checkAddrAssignType(device: DeviceState): CheckResult {
  const { link } = device;
  const value = device.addrAssignType;
  const named = value === null ? 'unknown' : `${value} (${ASSIGN_TYPES[value] ?? '?'})`;
  const evidence = [`/sys/class/net/${link.name}/addr_assign_type = ${named}`];
  if (value === NET_ADDR_RANDOM) {
    return {
      id: 'addr-assign-type',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name} still has the kernel's random MAC (addr_assign_type 1): udev's MACAddressPolicy rewrites it on the next add event (udevadm trigger)`,
      evidence,
      fix: `Write the MAC it already has once (addr_assign_type becomes 3, which udev leaves alone); ${device.fix.guard('doctor', '--fix')} does that and restores the neighbour entries.`,
    };
  }
  if (value === null) {
    return {
      id: 'addr-assign-type',
      device: link.name,
      verdict: 'warn',
      summary: `addr_assign_type of ${link.name} could not be read`,
      evidence,
      fix: "Run the doctor in the node's own network namespace (or with --netns by name) so sysfs can be read.",
    };
  }
  return {
    id: 'addr-assign-type',
    device: link.name,
    verdict: 'ok',
    summary: `addr_assign_type ${named}: udev's MACAddressPolicy leaves it alone`,
    evidence,
    fix: null,
  };
}

export function checkNeighbours(device: DeviceState, peersGiven: boolean): CheckResult {
  const { link } = device;
  const ip = device.neighbours.filter((n) => n.family !== 'bridge');
  const fdb = device.neighbours.filter((n) => n.family === 'bridge');
  const permanent = ip.filter((n) => n.permanent);
  const evidence = [
    ...permanent.map(
      (n) => `neigh ${n.destination ?? '?'} lladdr ${n.lladdr ?? 'none'} ${n.states.join(',')}`,
    ),
    ...ip
      .filter((n) => !n.permanent && !n.states.includes('noarp'))
      .map(
        (n) =>
          `neigh ${n.destination ?? '?'} ${n.lladdr ?? ''} ${n.states.join(',')} (not permanent)`,
      ),
    ...fdb.map(
      (n) =>
        `fdb ${n.lladdr ?? '?'} dst ${n.destination ?? 'none'}${n.permanent ? ' permanent' : ''}`,
    ),
  ];
  const problems: string[] = [];
  const warnings: string[] = [];
  if (device.peers.length > 0) {
    for (const peer of device.peers) {
      const arp = ip.find((n) => n.destination === peer.vtepIp);
      if (!arp) problems.push(`no neighbour entry for ${peer.vtepIp} (published ${peer.mac})`);
      else if (arp.lladdr !== peer.mac) {
        problems.push(`${peer.vtepIp} points at ${arp.lladdr ?? 'none'}, published ${peer.mac}`);
      } else if (!arp.permanent) problems.push(`${peer.vtepIp} is not permanent`);
      if (peer.underlayIp !== undefined) {
        const entry = fdb.find((n) => n.lladdr === peer.mac && n.destination === peer.underlayIp);
        if (!entry) problems.push(`no FDB entry ${peer.mac} dst ${peer.underlayIp}`);
        else if (!entry.permanent)
          problems.push(`FDB entry ${peer.mac} dst ${peer.underlayIp} is not permanent`);
      }
    }
    const published = new Set(device.peers.map((p) => p.vtepIp));
    const macs = new Set(device.peers.map((p) => p.mac));
    for (const n of permanent) {
      if (n.destination !== null && !published.has(n.destination)) {
        warnings.push(`${n.destination} is not a published VTEP (a node that left?)`);
      }
    }
    for (const n of fdb) {
      if (n.lladdr !== null && n.lladdr !== '00:00:00:00:00:00' && !macs.has(n.lladdr)) {
        warnings.push(
          `FDB entry ${n.lladdr} dst ${n.destination ?? 'none'} is not a published MAC (stale)`,
        );
      }
    }
  } else {
    for (const n of permanent) {
      if (n.lladdr !== null && !fdb.some((f) => f.lladdr === n.lladdr)) {
        problems.push(
          `${n.destination ?? '?'} points at ${n.lladdr}, which has no FDB entry: its traffic has no underlay destination`,
        );
      }
    }
    for (const n of ip.filter(
      (e) => e.states.includes('failed') || e.states.includes('incomplete'),
    )) {
      warnings.push(
        `${n.destination ?? '?'} is unresolved (${n.states.join(',')}): no published entry for it`,
      );
    }
  }
  const counts = `${permanent.length} permanent neighbour and ${fdb.length} FDB entries`;
  if (problems.length > 0) {
    return {
      id: 'neighbours',
      device: link.name,
      verdict: 'fail',
      summary: `${link.name}: ${problems.join('; ')}`,
      evidence: [...evidence, ...warnings],
      fix: peersGiven
        ? `Re-install the published entries (${device.fix.guard('doctor', '--fix --peer ...')} does it), or restart flannel so it re-programs them.`
        : `Restart flannel so it re-programs its neighbour and FDB entries, or pass the published peers: ${device.fix.guard('doctor', '--fix --peer ...')}.`,
    };
  }
  if (warnings.length > 0) {
    return {
      id: 'neighbours',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name}: ${warnings.join('; ')}`,
      evidence,
      fix: `Remove entries for nodes that no longer exist (${device.fix.ip(`neigh del ADDRESS dev ${link.name}`)}, and its FDB entry) or restart flannel.`,
    };
  }
  return {
    id: 'neighbours',
    device: link.name,
    verdict: 'ok',
    summary: peersGiven
      ? `${link.name}: ${counts}, every published peer present and correct`
      : `${link.name}: ${counts}, consistent (no published peers given: pass --peer to compare)`,
    evidence,
    fix: null,
  };
}

function featureState(device: DeviceState, name: string): FeatureState | undefined {
  return device.features?.find((f) => f.name === name);
}

export function checkOffload(
  device: DeviceState,
  policy: Readonly<Record<string, boolean>>,
): CheckResult {
  const { link } = device;
  const entries = Object.entries(policy);
  if (entries.length === 0) {
    return {
      id: 'offload',
      device: link.name,
      verdict: 'ok',
      summary: 'no offload policy (--offload none)',
      evidence: [],
      fix: null,
    };
  }
  if (device.features === null) {
    return {
      id: 'offload',
      device: link.name,
      verdict: 'warn',
      summary: `offload features of ${link.name} could not be read`,
      evidence: [],
      fix: "Run the doctor with CAP_NET_ADMIN in the node's namespace.",
    };
  }
  const evidence: string[] = [];
  const off: string[] = [];
  for (const [name, wanted] of entries) {
    const feature = featureState(device, name);
    if (!feature) {
      evidence.push(`${name}: not a feature of this kernel`);
      off.push(name);
      continue;
    }
    evidence.push(
      `${name}: ${feature.active ? 'on' : 'off'}${feature.fixed ? ' [fixed]' : ''} (policy ${wanted ? 'on' : 'off'})`,
    );
    if (feature.active !== wanted) off.push(name);
  }
  if (off.length > 0) {
    const settings = entries.map(([name, on]) => `${name} ${on ? 'on' : 'off'}`).join(' ');
    return {
      id: 'offload',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name}: ${off.join(', ')} not at the policy`,
      evidence,
      fix: `Apply the policy (${device.fix.ethtool(`-K ${link.name} ${settings}`)}; ${device.fix.guard('doctor', '--fix')} does it) and keep it with ${device.fix.guard('watch')}, since a re-created device loses it.`,
    };
  }
  return {
    id: 'offload',
    device: link.name,
    verdict: 'ok',
    summary: `${link.name}: ${entries.map(([n, on]) => `${n} ${on ? 'on' : 'off'}`).join(', ')} as the policy wants`,
    evidence,
    fix: null,
  };
}

function txChecksumOn(device: DeviceState): boolean | null {
  return featureState(device, 'tx-checksum-ip-generic')?.active ?? null;
}

/** A VMXNET3 parent's offloads of UDP-tunnelled packets (the BZ#1960702 workaround's). */
const PARENT_TUNNEL_OFFLOADS: readonly string[] = [
  'tx-udp_tnl-segmentation',
  'tx-udp_tnl-csum-segmentation',
];

export async function checkUnderlayDriver(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const vx = link.vxlan;
  let underlay: string | null = null;
  const evidence: string[] = [];
  if (vx?.underlayIfindex != null && link.linkNetnsid === null) {
    underlay = gathered.links.find((l) => l.ifindex === vx.underlayIfindex)?.name ?? null;
    evidence.push(
      `underlay from the device (IFLA_VXLAN_LINK ${vx.underlayIfindex}): ${underlay ?? 'not found'}`,
    );
  }
  if (underlay === null && vx?.local) {
    underlay = await gathered.probe.interfaceWithAddress(vx.local);
    evidence.push(`underlay by local address ${vx.local}: ${underlay ?? 'not found'}`);
  }
  if (underlay === null) {
    return {
      id: 'underlay-driver',
      device: link.name,
      verdict: 'warn',
      summary: `the underlay NIC of ${link.name} is unknown`,
      evidence,
      fix: 'Create the VXLAN device with dev/local (flannel does: --iface) so the underlay NIC is known.',
    };
  }
  let driver = '';
  try {
    const info = await gathered.probe.driverInfo(underlay);
    driver = info.driver;
    evidence.push(
      `${underlay}: driver ${info.driver} ${info.version}${info.firmwareVersion ? `, firmware ${info.firmwareVersion}` : ''}${info.busInfo ? `, bus ${info.busInfo}` : ''}`,
    );
  } catch (error) {
    evidence.push(
      `${underlay}: driver unknown (${error instanceof Error ? error.message : String(error)})`,
    );
  }
  const port = vx?.port ?? null;
  const offloadOn = txChecksumOn(device);
  evidence.push(
    `VXLAN port ${port ?? '?'}, tx-checksum-ip-generic ${offloadOn === null ? '?' : offloadOn ? 'on' : 'off'} on ${link.name}`,
  );
  if (driver === 'vmxnet3' && port === 8472) {
    // The parent NIC's own tunnel offloads: reported, never changed (the node's NIC is not ours).
    const tunnel = await gathered.probe.features(underlay).then(
      (features) =>
        features
          .filter((f) => PARENT_TUNNEL_OFFLOADS.includes(f.name) && f.active)
          .map((f) => f.name),
      () => [],
    );
    evidence.push(
      `${underlay}: ${tunnel.length === 0 ? 'no tunnel offload on' : `${tunnel.join(', ')} on`}`,
    );
    if (offloadOn !== false) {
      const parent =
        tunnel.length === 0
          ? ''
          : ` The parent NIC is left as it is: Red Hat's workaround for BZ#1960702 also turns its tunnel offloads off (${device.fix.ethtool(`-K ${underlay} ${tunnel.map((f) => `${f} off`).join(' ')}`)}), as does a VMXNET3 without the bug (an ESXi or VM hardware update).`;
      return {
        id: 'underlay-driver',
        device: link.name,
        verdict: 'fail',
        summary: `${underlay} is VMXNET3 and ${link.name} uses UDP 8472 with TX checksum offload on: inner TCP/UDP checksums come out wrong (VMXNET3 v4, Red Hat BZ#1960702) - ping works, TCP and UDP do not`,
        evidence,
        fix: `Turn TX checksum offload off on the VXLAN device (${device.fix.ethtool(`-K ${link.name} tx-checksum-ip-generic off`)}; ${device.fix.guard('doctor', '--fix')}, and ${device.fix.guard('watch')} keeps it off).${parent}`,
      };
    }
    return {
      id: 'underlay-driver',
      device: link.name,
      verdict: 'ok',
      summary: `${underlay} is VMXNET3 with VXLAN on 8472, and TX checksum offload is off on ${link.name} (the VMXNET3 v4 checksum bug is avoided)`,
      evidence,
      fix: null,
    };
  }
  return {
    id: 'underlay-driver',
    device: link.name,
    verdict: driver === '' ? 'warn' : 'ok',
    summary:
      driver === ''
        ? `driver of ${underlay} unknown`
        : `${underlay} (${driver}): no known bad combination with VXLAN port ${port ?? '?'}`,
    evidence,
    fix:
      driver === '' ? 'Run the doctor with CAP_NET_ADMIN so ETHTOOL_GDRVINFO can be read.' : null,
  };
}

/** Kernels up to 5.7 corrupt VXLAN checksums when masquerading with --random-fully. */
export function kernelAffectedByRandomFully(release: string): boolean {
  const match = /^(\d+)\.(\d+)/.exec(release);
  if (!match) return false;
  return compareVersions(`${match[1]}.${match[2]}`, '5.7') <= 0;
}

export async function checkRandomFully(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const kernel = gathered.kernel;
  const affected = kernelAffectedByRandomFully(kernel);
  const rules = await gathered.probe.natRules();
  const lines = rules.sources.flatMap(({ tool, text }) =>
    text
      .split('\n')
      .filter((line) => /masquerade/i.test(line) && /random-fully|fully-random/.test(line))
      .map((line) => `${tool}: ${line.trim()}`),
  );
  const offloadOn = txChecksumOn(device);
  const evidence = [
    `kernel ${kernel}${affected ? ' (5.7 or older)' : ''}`,
    `NAT rules read with ${rules.sources.map((s) => s.tool).join(', ') || 'nothing'}`,
    ...rules.unavailable.map((why) => `not read: ${why}`),
    ...(lines.length > 0 ? lines : ['no MASQUERADE --random-fully rule']),
    `tx-checksum-ip-generic ${offloadOn === null ? '?' : offloadOn ? 'on' : 'off'} on ${link.name}`,
  ];
  const result = (verdict: Verdict, summary: string, fix: string | null): CheckResult => ({
    id: 'random-fully',
    device: link.name,
    verdict,
    summary,
    evidence,
    fix,
  });
  if (!affected) {
    return result(
      'ok',
      `kernel ${kernel} is newer than 5.7: --random-fully masquerade does not break VXLAN checksums`,
      null,
    );
  }
  if (lines.length > 0) {
    if (offloadOn !== false) {
      return result(
        'fail',
        `kernel ${kernel} with MASQUERADE --random-fully and TX checksum offload on ${link.name}: VXLAN packets leave with bad checksums (TCP/UDP across nodes fail, ping works)`,
        `Turn TX checksum offload off on ${link.name} (${device.fix.ethtool(`-K ${link.name} tx-checksum-ip-generic off`)}; ${device.fix.guard('doctor', '--fix')}) or upgrade the kernel past 5.7.`,
      );
    }
    return result(
      'ok',
      `kernel ${kernel} masquerades with --random-fully, but TX checksum offload is off on ${link.name}`,
      null,
    );
  }
  if (rules.sources.length === 0) {
    return result(
      'warn',
      `kernel ${kernel} is 5.7 or older and the NAT rules could not be read`,
      `Check for MASQUERADE --random-fully (iptables-save -t nat) and keep TX checksum offload off on ${link.name}.`,
    );
  }
  return result(
    'ok',
    `kernel ${kernel} is 5.7 or older, but nothing masquerades with --random-fully`,
    null,
  );
}

export async function checkVxlanPort(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const port = link.vxlan?.port ?? 8472;
  const sockets = (await gathered.probe.udpSockets()).filter((s) => s.port === port);
  const owners = await gathered.probe.socketOwners(sockets.map((s) => s.inode));
  const evidence = sockets.map((socket) => {
    const held = owners.get(socket.inode) ?? [];
    return `udp ${socket.family} ${socket.localAddress}:${port} inode ${socket.inode}: ${held.length > 0 ? held.map((o) => `${o.command} (pid ${o.pid})`).join(', ') : 'kernel socket (VXLAN)'}`;
  });
  const userspace = sockets.flatMap((socket) => owners.get(socket.inode) ?? []);
  if (userspace.length > 0) {
    const who = [...new Set(userspace.map((o) => `${o.command} (pid ${o.pid})`))].join(', ');
    return {
      id: 'vxlan-port',
      device: link.name,
      verdict: 'fail',
      summary: `UDP port ${port} of ${link.name} is held by ${who}${link.up ? '' : `: ${link.name} cannot come up (Address already in use)`}`,
      evidence,
      fix: `Stop ${who} or move it off UDP ${port} (or give flannel another port with the VXLAN "Port" setting).`,
    };
  }
  if (!link.up) {
    return {
      id: 'vxlan-port',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name} is down, so nothing listens on UDP ${port}`,
      evidence,
      fix: `Bring ${link.name} up (or restart flannel).`,
    };
  }
  if (sockets.length === 0) {
    return {
      id: 'vxlan-port',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name} is up but no socket is bound to UDP ${port}`,
      evidence,
      fix: `Re-create ${link.name} (restart flannel).`,
    };
  }
  return {
    id: 'vxlan-port',
    device: link.name,
    verdict: 'ok',
    summary: `UDP ${port} is held by the kernel's VXLAN socket only`,
    evidence,
    fix: null,
  };
}

/** Runs every check on gathered state. */
/** Peers probed by the doctor: a sample as small as the guard's. */
const PROBED_PEERS = 8;

/**
 * Measures what the offload check can only infer: one round of `--offload auto`'s probes to the
 * device's peers (its permanent ARP entries) with the offload as it is. Echo answered but UDP
 * and TCP silent on every peer: the checksums do not arrive (fail); all answered (ok).
 */
export async function checkOffloadProbe(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const base = { id: 'offload-probe' as const, device: link.name };
  const peers = [
    ...new Set(
      device.neighbours
        .filter((n) => n.family === 'inet' && n.permanent)
        .flatMap((n) => (n.destination === null ? [] : [n.destination])),
    ),
  ].slice(0, PROBED_PEERS);
  const state = device.features?.find((f) => f.name === 'tx-checksum-ip-generic')?.active;
  const offload = `tx-checksum-ip-generic ${state === undefined ? 'unknown' : state ? 'on' : 'off'}`;
  if (link.kind !== 'vxlan' || peers.length === 0) {
    return {
      ...base,
      verdict: 'ok',
      summary: `${link.name}: no peer VTEP to probe (no permanent ARP entry)`,
      evidence: [offload],
      fix: null,
    };
  }
  let answers: PathAnswer[];
  try {
    answers = await gathered.probe.probePaths(link.name, peers);
  } catch (error) {
    return {
      ...base,
      verdict: 'warn',
      summary: `${link.name}: the paths could not be probed (${(error as Error).message})`,
      evidence: [offload],
      fix: 'Run the doctor with CAP_NET_RAW (a raw ICMP socket sends the echo).',
    };
  }
  const judged = judgePaths(answers);
  const evidence = [
    offload,
    ...answers.map(
      (a) =>
        `${a.address}: echo ${a.echo ? 'yes' : 'no'}, udp ${a.udp ? 'yes' : 'no'}, tcp ${a.tcp ? 'yes' : 'no'}`,
    ),
  ];
  if (judged.verdict === 'broken') {
    return {
      ...base,
      verdict: 'fail',
      summary: `${link.name}: ${judged.why} with ${offload}: checksums left to the NIC arrive unfinished (TCP and UDP between nodes fail, ping works)`,
      evidence,
      fix:
        state === true
          ? `Turn tx-checksum-ip-generic off (${device.fix.guard('doctor', '--fix')}, or ${device.fix.guard('watch', '--offload auto')} to measure and fix it on every node).`
          : 'The offload is already off here: look for a filter on UDP and TCP between the nodes.',
    };
  }
  return {
    ...base,
    verdict: judged.verdict === 'healthy' ? 'ok' : 'warn',
    summary: `${link.name}: ${judged.why} with ${offload}`,
    evidence,
    fix:
      judged.verdict === 'healthy'
        ? null
        : 'Check that the peers are up and that nothing filters ICMP, UDP or TCP between the nodes.',
  };
}

/**
 * The passive evidence: packets this namespace received with bad checksums (/proc/net/snmp),
 * read when the doctor began and again now, after the probes. Rising during the run: a peer
 * sends with broken TX checksum offload now (fail); counted before only: it did once (warn).
 */
export async function checkChecksumErrors(gathered: Gathered): Promise<CheckResult> {
  const base = { id: 'checksum-errors' as const, device: null };
  const unreadable = (error: Error): CheckResult => ({
    ...base,
    verdict: 'warn',
    summary: `the checksum-error counters could not be read (${error.message})`,
    evidence: [],
    fix: 'Run the doctor where /proc/net/snmp of the namespace can be read.',
  });
  const start = gathered.checksumErrorsAtStart;
  if (start instanceof Error) return unreadable(start);
  const end = await readChecksumErrors(gathered.probe);
  if (end instanceof Error) return unreadable(end);
  const seconds = ((end.at - start.at) / 1000).toFixed(1);
  const rose = describeChecksumCounts(checksumErrorRise(end.counters, start.counters));
  const counted = describeChecksumCounts(end.counters);
  const evidence = [
    `/proc/net/snmp InCsumErrors: udp ${end.counters.udp ?? 'not kept'}, tcp ${end.counters.tcp ?? 'not kept'}; snmp6 Udp6InCsumErrors ${end.counters.udp6 ?? 'not kept'}`,
    `rise during the doctor's ${seconds} s: ${rose || 'none'}`,
  ];
  const peersFix = `Run ${gathered.fix.guard('doctor')} on the other nodes (its offload-probe check finds the sender), or ${gathered.fix.guard('watch', '--offload auto')} on every node.`;
  if (rose !== '') {
    return {
      ...base,
      verdict: 'fail',
      summary: `${rose} packets with bad checksums received in ${seconds} s and dropped: a peer sends with broken TX checksum offload now`,
      evidence,
      fix: peersFix,
    };
  }
  if (counted !== '') {
    return {
      ...base,
      verdict: 'warn',
      summary: `${counted} packets with bad checksums received since the namespace began, none during this run: a peer sent with broken TX checksum offload before`,
      evidence,
      fix: `If it comes back: ${peersFix}`,
    };
  }
  return {
    ...base,
    verdict: 'ok',
    summary: 'no packet with a bad checksum received in this namespace',
    evidence,
    fix: null,
  };
}

export async function runChecks(gathered: Gathered): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  for (const subject of gathered.subjects) {
    results.push(
      checkLinkFiles(evaluateLinkFiles(gathered.linkFiles, subject, gathered.host), gathered.fix),
    );
  }
  const findingsBySubject = new Map(
    gathered.subjects.map((subject) => [subject.name, rulesTouching(gathered.rules, subject)]),
  );
  for (const subject of gathered.subjects) {
    results.push(checkUdevRules(subject, findingsBySubject.get(subject.name) ?? []));
  }
  for (const subject of gathered.subjects) {
    results.push(
      checkNetworkManager(
        gathered.nm,
        subject,
        findingsBySubject.get(subject.name) ?? [],
        gathered.globs,
      ),
    );
  }
  results.push(...checkVtep(gathered));
  for (const device of gathered.devices) {
    results.push(checkMac(device));
    results.push(checkAddrAssignType(device));
    results.push(checkNeighbours(device, gathered.peersGiven));
    results.push(checkOffload(device, gathered.offload));
    results.push(await checkOffloadProbe(gathered, device));
    if (device.link.kind !== 'vxlan') continue;
    results.push(await checkUnderlayDriver(gathered, device));
    results.push(await checkRandomFully(gathered, device));
    results.push(await checkVxlanPort(gathered, device));
  }
  // Last: the longest window over the counters, the probes' answers included.
  results.push(await checkChecksumErrors(gathered));
  return results;
}
