/**
 * What the doctor reads before it judges: the namespace's links, neighbours and features
 * (through the one-shot API), the published MACs and peers, the configuration files under the
 * root (.link files, udev rules, NetworkManager) and the system probes, once each.
 */
import { isIP } from 'node:net';
import { DEFAULT_INTERFACES } from '../core/defaults';
import { fixedOffloadPolicy } from '../core/options';
import { getFeatures, getLinks, getNeighbours } from '../core/oneshot';
import type { PeerExpectation } from '../ensure/ensure';
import { monotonicMs } from '../core/clock';
import type { ChecksumErrorCounters, LinkInfo } from '../core/types';
import { compileInterfaceGlob } from '../core/validate';
import { FsRoot } from '../core/fsroot';
import { UdevView } from '../udev/view';
import { attributeWriter } from '../udev/writer';
import { loadLinkFiles, type DeviceFacts } from '../udev/link-files';
import { loadNetworkManager } from './networkmanager';
import { systemProbe, type SystemProbe } from './system';
import { loadRules } from './udev-rules';
import { type DeviceState, type DoctorInput, type Gathered, fixCommands } from './check-types';

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
    cluster: input.cluster ?? null,
    passive: input.passive === true,
    checksumErrorsAtStart,
  };
}

export async function readChecksumErrors(
  probe: SystemProbe,
): Promise<{ counters: ChecksumErrorCounters; at: number } | Error> {
  try {
    return { counters: await probe.checksumErrors(), at: monotonicMs() };
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

// --- configuration ------------------------------------------------------------------------
