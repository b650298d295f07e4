/**
 * The doctor's checks. Each returns a verdict (ok / warn / fail), the evidence it is based on,
 * and the fix in one sentence. Configuration checks read files under the root
 * (config-checks.ts); device checks read the namespace through the one-shot API and the system
 * probes (device-checks.ts, offload-checks.ts), from what gather.ts read once.
 */
import { evaluateLinkFiles } from '../udev/link-files';
import { rulesTouching } from './udev-rules';
import { type CheckResult, type ClusterPublished, type Gathered } from './check-types';
import { checkLinkFiles, checkNetworkManager, checkUdevRules } from './config-checks';
import { checkAddrAssignType, checkMac, checkNeighbours, checkVtep } from './device-checks';
import {
  checkChecksumErrors,
  checkOffload,
  checkOffloadProbe,
  checkRandomFully,
  checkUnderlayDriver,
  checkVxlanPort,
} from './offload-checks';

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
  if (gathered.cluster) results.push(checkClusterMacs(gathered.cluster));
  return results;
}

/**
 * Two Nodes publishing one VtepMAC (nodes cloned with one /etc/machine-id under
 * MACAddressPolicy=persistent): every other node's FDB sends both nodes' traffic to one of them.
 */
export function checkClusterMacs(cluster: ClusterPublished): CheckResult {
  const byMac = new Map<string, string[]>();
  for (const { node, device, mac } of cluster.macs) {
    const key = `${device} ${mac}`;
    byMac.set(key, [...(byMac.get(key) ?? []), node]);
  }
  const duplicates = [...byMac].filter(([, nodes]) => nodes.length > 1);
  const evidence = duplicates.map(
    ([key, nodes]) => `${key}: published by ${nodes.sort().join(', ')}`,
  );
  return {
    id: 'cluster-vtep-macs',
    device: null,
    verdict: duplicates.length > 0 ? 'fail' : 'ok',
    summary:
      duplicates.length > 0
        ? `${duplicates.length} VtepMAC(s) published by more than one of ${cluster.nodes} Nodes`
        : `${cluster.macs.length} VtepMACs of ${cluster.nodes} Nodes, each published once`,
    evidence,
    fix:
      duplicates.length > 0
        ? 'Give each of those nodes its own /etc/machine-id (systemd-machine-id-setup on a cloned image) and restart flannel there, or pin a distinct MAC with MACAddressPolicy=none.'
        : null,
  };
}
