/**
 * Whether NetworkManager would leave the VXLAN device alone. NetworkManager.conf(5): files in
 * /usr/lib/NetworkManager/conf.d, then /run/NetworkManager/conf.d, then NetworkManager.conf,
 * then /etc/NetworkManager/conf.d (each directory in name order; the same name in /etc hides
 * /run and /usr/lib, in /run hides /usr/lib), then NetworkManager-intern.conf; later values win,
 * `key+=`/`key-=` edit lists. A device is unmanaged by `[keyfile] unmanaged-devices`, by a
 * `[device*]` section matching it with `managed=0`, or by a udev rule setting NM_UNMANAGED=1.
 *
 * A managed device is what connection profiles act on (nm-settings-keyfile(5): keyfiles in
 * /etc, /run and /usr/lib/NetworkManager/system-connections). A profile bound to the device -
 * by `[connection] interface-name`, `[match] interface-name` or `[ethernet] mac-address` -
 * would be activated on it, and with `[ethernet] cloned-mac-address` it sets the device's MAC.
 */
import { posix } from 'node:path';

import { nmGlob } from '../core/glob';
import type { FsRoot } from '../core/fsroot';
import { parseKeyFile, splitNmList } from '../core/ini';
import type { DeviceFacts } from '../udev/link-files';

const NM_BINARIES = ['/usr/sbin/NetworkManager', '/usr/bin/NetworkManager', '/sbin/NetworkManager'];

export interface NmSection {
  file: string;
  name: string;
  values: Map<string, string>;
}

export interface NmConfig {
  installed: boolean;
  /** Files read, in order. */
  files: string[];
  /** Files skipped by `[.config] enable=false`. */
  disabled: string[];
  unmanagedDevices: { specs: string[]; from: string[] };
  /** [device*] sections, highest precedence first. */
  deviceSections: NmSection[];
  /** Connection profiles (keyfiles), in directory and name order. */
  profiles: NmProfile[];
}

/** A key of a profile, where it is written. */
export interface NmProfileKey {
  file: string;
  line: number;
  section: string;
  key: string;
  value: string;
}

export interface NmProfile {
  file: string;
  id: string | undefined;
  autoconnect: boolean;
  interfaceName: NmProfileKey | undefined;
  matchInterfaceName: NmProfileKey | undefined;
  macAddress: NmProfileKey | undefined;
  clonedMacAddress: NmProfileKey | undefined;
}

const PROFILE_DIRS = [
  '/etc/NetworkManager/system-connections',
  '/run/NetworkManager/system-connections',
  '/usr/lib/NetworkManager/system-connections',
];
/** Profiles read at most (a node has a handful; a directory of thousands is not read whole). */
const MAX_PROFILES = 256;
const MAX_PROFILE_BYTES = 64 * 1024;

/** The keyfile plugin's names: NAME.nmconnection, or a legacy name without an extension. */
function isProfileName(name: string): boolean {
  if (name.startsWith('.') || name.endsWith('~')) return false;
  return name.endsWith('.nmconnection') || !name.includes('.');
}

function loadProfiles(fs: FsRoot): NmProfile[] {
  const profiles: NmProfile[] = [];
  for (const dir of PROFILE_DIRS) {
    const names = fs
      .list(dir)
      .filter(isProfileName)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const name of names) {
      if (profiles.length >= MAX_PROFILES) return profiles;
      const file = posix.join(dir, name);
      const text = fs.readText(file, MAX_PROFILE_BYTES);
      if (text === null) continue;
      const keys = new Map<string, NmProfileKey>();
      for (const entry of parseKeyFile(text).entries) {
        // "802-3-ethernet" is the ethernet setting's old name, still read.
        const section = entry.section === '802-3-ethernet' ? 'ethernet' : (entry.section ?? '');
        keys.set(`${section}.${entry.key}`, {
          file,
          line: entry.line,
          section: entry.section ?? '',
          key: entry.key,
          value: entry.value.trim(),
        });
      }
      profiles.push({
        file,
        id: keys.get('connection.id')?.value,
        autoconnect: boolValue(keys.get('connection.autoconnect')?.value) !== false,
        interfaceName: keys.get('connection.interface-name'),
        matchInterfaceName: keys.get('match.interface-name'),
        macAddress: keys.get('ethernet.mac-address'),
        clonedMacAddress: keys.get('ethernet.cloned-mac-address'),
      });
    }
  }
  return profiles;
}

/** `[match] interface-name`: globs, `!` excluding, every `&` one mandatory (nm-settings(5)). */
function matchInterfaceNames(value: string, name: string): boolean {
  let optionalSeen = false;
  let optionalHit = false;
  for (const raw of splitNmList(value)) {
    const negated = raw.startsWith('!');
    const mandatory = raw.startsWith('&');
    const pattern = negated || mandatory ? raw.slice(1) : raw;
    const hit = nmGlob(pattern, name);
    if (negated && hit) return false;
    if (mandatory && !hit) return false;
    if (!negated && !mandatory) {
      optionalSeen = true;
      optionalHit ||= hit;
    }
  }
  return !optionalSeen || optionalHit;
}

/** The keys binding PROFILE to DEVICE, or null when it is not for this device. */
export function profileBinding(profile: NmProfile, device: DeviceFacts): NmProfileKey[] | null {
  const binding: NmProfileKey[] = [];
  if (profile.interfaceName) {
    if (profile.interfaceName.value !== device.name) return null;
    binding.push(profile.interfaceName);
  }
  if (profile.matchInterfaceName) {
    if (!matchInterfaceNames(profile.matchInterfaceName.value, device.name)) return null;
    binding.push(profile.matchInterfaceName);
  }
  if (profile.macAddress) {
    if (profile.macAddress.value.toLowerCase() !== device.mac) return null;
    binding.push(profile.macAddress);
  }
  // Bound by nothing, a profile is for a device of its own (a vxlan profile creates one).
  return binding.length > 0 ? binding : null;
}

/** Whether a cloned-mac-address value changes the MAC ("preserve" keeps the one it has). */
export const setsMac = (key: NmProfileKey | undefined): key is NmProfileKey =>
  key !== undefined && key.value !== '' && key.value.toLowerCase() !== 'preserve';

function confDirFiles(fs: FsRoot): string[] {
  const dirs = {
    usr: '/usr/lib/NetworkManager/conf.d',
    run: '/run/NetworkManager/conf.d',
    etc: '/etc/NetworkManager/conf.d',
  };
  const names = (dir: string): string[] =>
    fs
      .list(dir)
      .filter((name) => name.endsWith('.conf') && !name.startsWith('.'))
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const etc = new Set(names(dirs.etc));
  const run = new Set(names(dirs.run));
  const ordered: string[] = [];
  for (const name of names(dirs.usr)) {
    if (!etc.has(name) && !run.has(name)) ordered.push(posix.join(dirs.usr, name));
  }
  for (const name of run) if (!etc.has(name)) ordered.push(posix.join(dirs.run, name));
  ordered.push('/etc/NetworkManager/NetworkManager.conf');
  for (const name of etc) ordered.push(posix.join(dirs.etc, name));
  ordered.push('/var/lib/NetworkManager/NetworkManager-intern.conf');
  return ordered.filter((path) => fs.exists(path) && !fs.isNullOrEmpty(path));
}

function boolValue(value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  const v = value.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  return undefined;
}

export function loadNetworkManager(fs: FsRoot): NmConfig {
  const installed =
    NM_BINARIES.some((path) => fs.exists(path)) || fs.isDirectory('/etc/NetworkManager');
  const config: NmConfig = {
    installed,
    files: [],
    disabled: [],
    unmanagedDevices: { specs: [], from: [] },
    deviceSections: [],
    profiles: [],
  };
  if (!installed) return config;
  config.profiles = loadProfiles(fs);
  const sectionsByFile: NmSection[][] = [];
  for (const file of confDirFiles(fs)) {
    const text = fs.readText(file);
    if (text === null) continue;
    const document = parseKeyFile(text);
    const enable = document.entries.find((e) => e.section === '.config' && e.key === 'enable');
    if (file !== '/etc/NetworkManager/NetworkManager.conf' && boolValue(enable?.value) === false) {
      config.disabled.push(file);
      continue;
    }
    config.files.push(file);
    const sections: NmSection[] = [];
    for (const entry of document.entries) {
      if (entry.section === 'keyfile' && entry.key === 'unmanaged-devices') {
        const specs = splitNmList(entry.value);
        const list = config.unmanagedDevices;
        if (entry.op === '=') list.specs = specs;
        else if (entry.op === '+=')
          list.specs.push(...specs.filter((s) => !list.specs.includes(s)));
        else list.specs = list.specs.filter((s) => !specs.includes(s));
        list.from.push(`${file}:${entry.line}`);
        continue;
      }
      const name = entry.section ?? '';
      if (name !== 'device' && !name.startsWith('device-')) continue;
      let section = sections.find((s) => s.name === name);
      if (!section) {
        section = { file, name, values: new Map() };
        sections.push(section);
      }
      section.values.set(entry.key, entry.value);
    }
    sectionsByFile.push(sections);
  }
  // Later files first; within a file top to bottom (plain [device] last).
  for (const sections of sectionsByFile.reverse()) {
    config.deviceSections.push(
      ...sections.filter((s) => s.name !== 'device'),
      ...sections.filter((s) => s.name === 'device'),
    );
  }
  return config;
}

/** NetworkManager's device-spec matching ("Device List Format" in NetworkManager.conf(5)). */
export function matchDeviceSpecs(specs: readonly string[], device: DeviceFacts): boolean {
  let positive = false;
  for (const raw of specs) {
    const except = raw.startsWith('except:');
    const spec = except ? raw.slice('except:'.length) : raw;
    const hit = matchSpec(spec, device, except);
    if (hit && except) return false;
    if (hit && !except) positive = true;
  }
  return positive;
}

function matchSpec(spec: string, device: DeviceFacts, qualifiedOnly: boolean): boolean {
  if (spec === '*') return !qualifiedOnly;
  const colon = spec.indexOf(':');
  const prefix = colon > 0 ? spec.slice(0, colon) : '';
  const rest = colon > 0 ? spec.slice(colon + 1) : spec;
  switch (prefix) {
    case 'interface-name':
      if (rest.startsWith('=')) return rest.slice(1) === device.name;
      return nmGlob(rest.startsWith('~') ? rest.slice(1) : rest, device.name);
    case 'mac':
      return device.mac !== null && rest.toLowerCase() === device.mac;
    case 'type':
      return rest === (device.kind ?? device.type);
    case 'driver':
      return rest.split('/')[0] === device.driver;
    default:
      if (qualifiedOnly || prefix !== '') return false;
      // Unqualified: an interface name (no glob) or a MAC.
      return /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(spec)
        ? device.mac !== null && spec.toLowerCase() === device.mac
        : spec === device.name;
  }
}

export interface NmVerdict {
  unmanaged: boolean;
  /** What decided it. */
  by: string[];
}

/** Whether NetworkManager leaves the device unmanaged; `udevUnmanaged` from NM_UNMANAGED rules. */
export function nmUnmanaged(
  config: NmConfig,
  device: DeviceFacts,
  udevUnmanaged: string[],
): NmVerdict {
  const by: string[] = [];
  let explicitManaged: string | null = null;
  let sectionUnmanaged = false;
  for (const section of config.deviceSections) {
    const match = section.values.get('match-device');
    if (match !== undefined && !matchDeviceSpecs(splitNmList(match), device)) continue;
    const managed = boolValue(section.values.get('managed'));
    if (managed !== undefined) {
      if (managed) explicitManaged = `${section.file} [${section.name}] managed=1`;
      else {
        sectionUnmanaged = true;
        by.push(`${section.file} [${section.name}] managed=0`);
      }
      break;
    }
    if (boolValue(section.values.get('stop-match')) === true) break;
  }
  if (matchDeviceSpecs(config.unmanagedDevices.specs, device)) {
    by.push(
      `[keyfile] unmanaged-devices=${config.unmanagedDevices.specs.join(';')} (${config.unmanagedDevices.from.join(', ')})`,
    );
  }
  if (explicitManaged === null) by.push(...udevUnmanaged.map((rule) => `udev ${rule}`));
  return {
    unmanaged:
      sectionUnmanaged ||
      matchDeviceSpecs(config.unmanagedDevices.specs, device) ||
      (explicitManaged === null && udevUnmanaged.length > 0),
    by,
  };
}
