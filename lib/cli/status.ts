/** A one-shot view of the managed devices: what `flannel-guard status` prints. */
import { AF_BRIDGE, AF_UNSPEC } from '../core/constants';
import { DEFAULT_INTERFACES } from '../core/defaults';
import { fixedOffloadPolicy, rejectUnknownOptions } from '../core/options';
import { openControl } from '../core/oneshot';
import { toLinkInfo, toNeighbourInfo } from '../core/records';
import { explicitMacSource } from '../guard/sources';
import type { VxlanInfo } from '../core/types';
import { compileInterfaceGlob, netnsTarget } from '../core/validate';
import type { SystemProbe } from '../doctor/system';

export interface StatusOptions {
  netns?: string;
  interfaces?: readonly string[];
  mac?: Record<string, string>;
  offload?: Readonly<Record<string, boolean>> | 'none';
}

export interface OffloadStatus {
  active: boolean | null;
  requested: boolean | null;
  fixed: boolean | null;
  /** Null when there is no policy for this feature. */
  matchesPolicy: boolean | null;
}

export interface StatusDevice {
  name: string;
  ifindex: number;
  kind: string;
  mac: string | null;
  desiredMac: string | null;
  addrAssignType: number | null;
  up: boolean;
  vxlan: VxlanInfo | null;
  permanentNeighbours: number;
  fdbEntries: number;
  offloads: Record<string, OffloadStatus>;
}

/** A device the globs match that is not VXLAN: `watch` never writes to it. */
export interface IgnoredDevice {
  name: string;
  ifindex: number;
  kind: string;
}

export interface StatusReport {
  netns: string | null;
  devices: StatusDevice[];
  ignored: IgnoredDevice[];
}

/** The doctor's probe of another namespace (loaded only then: it runs child processes). */
async function sysfsInNetns(netns: string): Promise<Pick<SystemProbe, 'addrAssignType'>> {
  const [{ systemProbe }, { FsRoot }] = await Promise.all([
    import('../doctor/system.js'),
    import('../core/fsroot.js'),
  ]);
  return systemProbe({ netns, fs: new FsRoot('/') });
}

/** Every name StatusOptions declares: anything else is a caller's mistake (EINVAL). */
const OPTION_NAMES = [
  'netns',
  'interfaces',
  'mac',
  'offload',
] as const satisfies readonly (keyof StatusOptions)[];

export async function readStatus(options: StatusOptions = {}): Promise<StatusReport> {
  rejectUnknownOptions(options, OPTION_NAMES, 'readStatus');
  const globs = (options.interfaces ?? DEFAULT_INTERFACES).map((g) => compileInterfaceGlob(g));
  const source = options.mac ? explicitMacSource(options.mac) : undefined;
  const policy = fixedOffloadPolicy(options.offload);
  const control = openControl(netnsTarget(options.netns));
  try {
    const matched = (await control.dumpLinks(true))
      .map((raw) => toLinkInfo(raw))
      .filter((link) => !link.loopback && globs.some((glob) => glob.matches(link.name)));
    // As `watch`: only VXLAN devices are managed; the others are named, never judged.
    const links = matched.filter((link) => link.kind === 'vxlan');
    const ignored = matched
      .filter((link) => link.kind !== 'vxlan')
      .map((link) => ({ name: link.name, ifindex: link.ifindex, kind: link.kind }));
    const neighbours = [
      ...(await control.dumpNeighbours(AF_UNSPEC, true)),
      ...(await control.dumpNeighbours(AF_BRIDGE, true)),
    ].map(toNeighbourInfo);
    // /sys shows this process's namespace only: another's is read by a child that mounts its own.
    const sysfsOf =
      control.ownNetns || options.netns === undefined || links.length === 0
        ? undefined
        : await sysfsInNetns(options.netns);
    const devices: StatusDevice[] = [];
    for (const link of links) {
      const features = new Map(
        (await control.getFeatures(link.name, true)).features.map((f) => [f.name, f]),
      );
      const offloads: Record<string, OffloadStatus> = {};
      for (const [name, wanted] of Object.entries(policy)) {
        const feature = features.get(name);
        offloads[name] = {
          active: feature?.active ?? null,
          requested: feature?.requested ?? null,
          fixed: feature?.fixed ?? null,
          matchesPolicy: feature ? feature.active === wanted : null,
        };
      }
      const own = neighbours.filter((n) => n.ifindex === link.ifindex);
      devices.push({
        name: link.name,
        ifindex: link.ifindex,
        kind: link.kind,
        mac: link.mac,
        desiredMac: source?.desiredMac(link.name) ?? null,
        addrAssignType:
          link.mac === null
            ? null
            : sysfsOf
              ? await sysfsOf.addrAssignType(link.name, link.ifindex)
              : control.readAddrAssignType(link.name, link.ifindex, link.mac),
        up: link.up,
        vxlan: link.vxlan,
        permanentNeighbours: own.filter((n) => n.family !== 'bridge' && n.permanent).length,
        fdbEntries: own.filter((n) => n.family === 'bridge').length,
        offloads,
      });
    }
    return { netns: options.netns ?? null, devices, ignored };
  } finally {
    control.close();
  }
}
