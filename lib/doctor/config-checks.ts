/**
 * The doctor's checks of configuration files under the root: systemd .link files, udev rules
 * and NetworkManager, each against the devices flannel uses; and the files `--fix` writes.
 */
import { DEFAULT_INTERFACES } from '../core/defaults';
import {
  macEffect,
  type DeviceFacts,
  type LinkEvaluation,
  type LinkFile,
} from '../udev/link-files';
import {
  nmUnmanaged,
  profileBinding,
  setsMac,
  type NmConfig,
  type NmProfileKey,
} from './networkmanager';
import { type RuleFinding } from './udev-rules';
import { type CheckResult, type FixCommands, fixCommands } from './check-types';

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
