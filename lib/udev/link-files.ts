/**
 * systemd .link files as systemd-udevd 252 applies them (systemd.link(5)): every `*.link` in
 * /etc, /run, /usr/local/lib, /usr/lib and /lib `systemd/network`, the same name in a directory
 * of higher priority replacing the others, empty files and /dev/null links masking, each file
 * followed by its `NAME.link.d/*.conf` drop-ins (same rules, parsed after it in name order).
 * The first file, in name order, whose [Match] matches the device is the one applied; its
 * MACAddressPolicy/MACAddress decide whether udev rewrites the MAC of a new device.
 */
import { posix } from 'node:path';

import { fnmatch } from '../core/glob';
import { NETWORK_DIRS, type FsRoot } from '../core/fsroot';
import { parseSystemdIni, splitWords } from '../core/ini';
import { CONDITIONS, testCondition, type ConditionName, type HostFacts } from './conditions';

export { compareVersions, type HostFacts } from './conditions';

export type Tristate = 'yes' | 'no' | 'unknown';

/** What udev knows about a network device when its `add` uevent is processed. */
export interface DeviceFacts {
  /** INTERFACE: the name at creation (OriginalName=). */
  name: string;
  /** IFLA_INFO_KIND ('vxlan'). */
  kind: string | null;
  /** DEVTYPE or the ARPHRD name, lower case ('vxlan' for a VXLAN device). */
  type: string | null;
  /** ID_NET_DRIVER / ethtool -i ('vxlan'). */
  driver: string | null;
  /** ID_PATH (none for virtual devices). */
  path: string | null;
  /** The MAC udev sees; null when unknown (a new VXLAN device gets a random one). */
  mac: string | null;
}

export type MacPolicy = 'persistent' | 'random' | 'none';

const MATCH_LISTS = ['MACAddress', 'PermanentMACAddress', 'Path', 'Driver', 'Type', 'Kind'];
const MATCH_KEYS = new Set<string>([...MATCH_LISTS, 'OriginalName', 'Property', ...CONDITIONS]);

export interface LinkFile {
  name: string;
  /** The main file, as the system sees its path. */
  path: string;
  /** Same-name files it replaces. */
  shadows: string[];
  masked: boolean;
  /** A dangling link or a folder: it replaces the lower files of its name, and applies to nothing. */
  unreadable: boolean;
  /** udev fails to load the file (a drop-in it cannot read): it applies to nothing. */
  loadError: string | null;
  dropins: string[];
  match: {
    lists: Record<string, string[]>;
    originalName: string[];
    property: string[];
  };
  conditions: Map<ConditionName, { value: string; negate: boolean }>;
  /** The effective MACAddressPolicy= (undefined: not set). */
  macAddressPolicy: MacPolicy | undefined;
  /** MACAddress= in [Link]. */
  macAddress: string | undefined;
  /**
   * [Match] has no valid setting and no condition: udev 252 ignores the file ("No valid
   * settings found in the [Match] section, ignoring file"), whatever systemd.link(5) says.
   */
  ignored: boolean;
  /** Things udev warns about and ignores (unknown keys, bad values). */
  warnings: string[];
}

function canonicalHwAddress(word: string): string | null {
  const colon =
    /^([0-9a-f]{1,2})[:-]([0-9a-f]{1,2})[:-]([0-9a-f]{1,2})[:-]([0-9a-f]{1,2})[:-]([0-9a-f]{1,2})[:-]([0-9a-f]{1,2})$/i.exec(
      word,
    );
  if (colon) {
    return colon
      .slice(1)
      .map((octet) => octet.toLowerCase().padStart(2, '0'))
      .join(':');
  }
  const dotted = /^([0-9a-f]{4})\.([0-9a-f]{4})\.([0-9a-f]{4})$/i.exec(word);
  if (dotted) {
    return dotted
      .slice(1)
      .join('')
      .toLowerCase()
      .replace(/(..)(?!$)/g, '$1:');
  }
  return null;
}

/** Reads one .link file with its drop-ins into the settings udev would use. */
export function loadLinkFile(
  fs: FsRoot,
  file: { name: string; path: string; masked: boolean; unreadable: boolean; shadows: string[] },
): LinkFile {
  const link: LinkFile = {
    name: file.name,
    path: file.path,
    shadows: file.shadows,
    masked: file.masked,
    unreadable: file.unreadable,
    loadError: null,
    dropins: [],
    match: { lists: {}, originalName: [], property: [] },
    conditions: new Map(),
    macAddressPolicy: undefined,
    macAddress: undefined,
    ignored: false,
    warnings: [],
  };
  if (file.masked || file.unreadable) return link;
  const listed = fs.confFiles(
    NETWORK_DIRS.map((dir) => posix.join(dir, `${file.name}.d`)),
    '.conf',
  );
  // A drop-in that is not there is skipped; one that cannot be read (a folder, a loop of
  // links) makes udev's parser fail, and the whole file is dropped.
  const broken = listed.find((dropin) => dropin.unreadable && !dropin.missing);
  if (broken) {
    link.loadError = `drop-in ${broken.path} cannot be read: udev fails to load the whole file`;
    link.warnings.push(`${file.path}: ${link.loadError}`);
    return link;
  }
  const dropins = listed.filter((dropin) => !dropin.masked && !dropin.unreadable);
  link.dropins = dropins.map((dropin) => dropin.path);
  for (const source of [file.path, ...link.dropins]) {
    const text = fs.readText(source);
    if (text === null) {
      link.warnings.push(`${source}: cannot be read`);
      continue;
    }
    const document = parseSystemdIni(text);
    for (const problem of document.problems) {
      link.warnings.push(`${source}:${problem.line}: ${problem.message}`);
    }
    for (const entry of document.entries) {
      const where = `${source}:${entry.line}`;
      if (entry.section === 'Match') applyMatch(link, entry.key, entry.value, where);
      else if (entry.section === 'Link') applyLink(link, entry.key, entry.value, where);
      else if (entry.section !== null && !entry.section.startsWith('X-')) {
        if (entry.section !== 'SR-IOV') {
          link.warnings.push(`${where}: unknown section [${entry.section}], ignored`);
        }
      }
    }
  }
  const empty =
    Object.values(link.match.lists).every((list) => list.length === 0) &&
    link.match.originalName.length === 0 &&
    link.match.property.length === 0;
  link.ignored = empty && link.conditions.size === 0;
  if (link.ignored) {
    link.warnings.push(
      `${file.path}: no valid setting in [Match]: udev ignores the whole file (OriginalName=* would match every interface)`,
    );
  }
  if (
    (link.macAddressPolicy === 'persistent' || link.macAddressPolicy === 'random') &&
    link.macAddress !== undefined
  ) {
    link.warnings.push(
      `${file.path}: MACAddress= is ignored with MACAddressPolicy=${link.macAddressPolicy}`,
    );
    link.macAddress = undefined;
  }
  return link;
}

function applyMatch(link: LinkFile, key: string, value: string, where: string): void {
  if (!MATCH_KEYS.has(key)) {
    const hint =
      key === 'Name' ? ' (Name= matches in .network files; a .link file needs OriginalName=)' : '';
    link.warnings.push(`${where}: unknown key ${key}= in [Match], ignored by udev${hint}`);
    return;
  }
  if ((CONDITIONS as readonly string[]).includes(key)) {
    const name = key as ConditionName;
    if (value === '') {
      link.conditions.delete(name);
      return;
    }
    const negate = value.startsWith('!');
    link.conditions.set(name, { value: negate ? value.slice(1) : value, negate });
    return;
  }
  const target =
    key === 'OriginalName'
      ? link.match.originalName
      : key === 'Property'
        ? link.match.property
        : (link.match.lists[key] ??= []);
  if (value === '') {
    target.length = 0;
    return;
  }
  if (key === 'MACAddress' || key === 'PermanentMACAddress') {
    for (const word of splitWords(value, false)) {
      const mac = canonicalHwAddress(word);
      if (mac === null) link.warnings.push(`${where}: ${key}= ${word} is not a MAC, ignored`);
      else target.push(mac);
    }
    return;
  }
  const invert = value.startsWith('!');
  const rest = invert ? value.slice(1) : value;
  if (key === 'OriginalName') {
    const words = splitIfnameWords(rest);
    if (words === null) {
      link.warnings.push(`${where}: OriginalName= ends in a lone backslash, ignored`);
      return;
    }
    for (const word of words) {
      if (!ifnameValid(word)) {
        link.warnings.push(
          `${where}: OriginalName= ${word} is not a valid interface name, ignored by udev`,
        );
        continue;
      }
      if (/^["']|["']$/.test(word)) {
        link.warnings.push(
          `${where}: OriginalName= ${word}: udev keeps the quotes, so it only matches a name with them`,
        );
      }
      target.push(invert ? `!${word}` : word);
    }
    return;
  }
  for (const word of splitWords(rest, key !== 'Property')) target.push(invert ? `!${word}` : word);
}

/**
 * OriginalName='s words as udev 252 reads them (extract_first_word() without
 * flags): split at whitespace, a backslash takes the next character as it
 * is, and quotes are kept as characters. null when a backslash ends it.
 */
function splitIfnameWords(value: string): string[] | null {
  const words: string[] = [];
  let word = '';
  for (let i = 0; i < value.length; i += 1) {
    const char = value[i] ?? '';
    if (char === '\\') {
      if (i + 1 >= value.length) return null;
      i += 1;
      word += value[i] ?? '';
    } else if (/\s/.test(char)) {
      if (word !== '') words.push(word);
      word = '';
    } else {
      word += char;
    }
  }
  if (word !== '') words.push(word);
  return words;
}

/** ifname_valid_full(word, 0): what udev accepts in OriginalName= (globs are names here). */
function ifnameValid(word: string): boolean {
  const bytes = Buffer.from(word);
  if (bytes.length === 0 || bytes.length > 15 || word === '.' || word === '..') return false;
  // A positive number is an ifindex, not a name.
  if (/^[0-9]+$/.test(word) && Number(word) > 0 && Number(word) <= 0x7fffffff) return false;
  return bytes.every(
    (byte) => byte > 32 && byte < 127 && byte !== 0x3a && byte !== 0x2f && byte !== 0x25,
  );
}

function applyLink(link: LinkFile, key: string, value: string, where: string): void {
  if (key === 'MACAddressPolicy') {
    if (value === '' || value === 'none') link.macAddressPolicy = 'none';
    else if (value === 'persistent' || value === 'random') link.macAddressPolicy = value;
    else link.warnings.push(`${where}: MACAddressPolicy=${value} is not valid, ignored`);
  } else if (key === 'MACAddress') {
    if (value === '') {
      link.macAddress = undefined;
      return;
    }
    const mac = canonicalHwAddress(value);
    if (mac === null) link.warnings.push(`${where}: MACAddress=${value} is not valid, ignored`);
    else link.macAddress = mac;
  }
}

/** net_condition_test_strv() */
export function testPatterns(patterns: readonly string[], value: string | null): boolean {
  if (patterns.length === 0) return true;
  let match = false;
  let positive = false;
  for (const raw of patterns) {
    const invert = raw.startsWith('!');
    const pattern = invert ? raw.slice(1) : raw;
    if (!invert) positive = true;
    if (value !== null && fnmatch(pattern, value)) {
      if (invert) return false;
      match = true;
    }
  }
  return positive ? match : true;
}

export interface MatchOutcome {
  result: Tristate;
  /** Why, in a few words (what failed or was unknowable). */
  reasons: string[];
}

/** Whether `link` would be applied to a device with these facts. */
export function matchLink(link: LinkFile, device: DeviceFacts, host: HostFacts): MatchOutcome {
  const reasons: string[] = [];
  let unknown = false;
  const fail = (reason: string): MatchOutcome => ({ result: 'no', reasons: [reason] });
  if (link.masked) return fail('masked');
  if (link.loadError !== null) return fail(link.loadError);
  if (link.unreadable)
    return fail('not a readable file (it still hides the lower files of its name)');
  if (link.ignored) return fail('ignored by udev: no valid setting in [Match]');
  const lists = link.match.lists;
  const macs = lists.MACAddress ?? [];
  if (macs.length > 0) {
    if (device.mac === null) {
      unknown = true;
      reasons.push('MACAddress= (the MAC of a new device is random)');
    } else if (!macs.includes(device.mac)) return fail(`MACAddress= does not list ${device.mac}`);
  }
  if ((lists.PermanentMACAddress ?? []).length > 0) {
    return fail('PermanentMACAddress= (a virtual device has no permanent MAC)');
  }
  const tests: [string, readonly string[], string | null][] = [
    ['Path', lists.Path ?? [], device.path],
    ['Driver', lists.Driver ?? [], device.driver],
    ['Type', lists.Type ?? [], device.type],
    ['Kind', lists.Kind ?? [], device.kind],
    ['OriginalName', link.match.originalName, device.name],
  ];
  for (const [key, patterns, value] of tests) {
    if (!testPatterns(patterns, value)) {
      return fail(`${key}=${patterns.join(' ')} does not match ${value ?? '(none)'}`);
    }
  }
  if (link.match.property.length > 0) {
    unknown = true;
    reasons.push('Property= (udev properties are not known here)');
  }
  for (const name of CONDITIONS) {
    const condition = link.conditions.get(name);
    if (!condition) continue;
    const outcome = testCondition(name, condition.value, host);
    if (outcome === 'unknown') {
      unknown = true;
      reasons.push(`${name}= (not evaluated)`);
      continue;
    }
    if (outcome === condition.negate) {
      return fail(`${name}=${condition.negate ? '!' : ''}${condition.value} is false here`);
    }
  }
  return { result: unknown ? 'unknown' : 'yes', reasons };
}

/** What the file does to the MAC of a new device whose kernel-assigned MAC is random. */
export function macEffect(link: LinkFile): { rewrites: boolean; describe: string } {
  const policy = link.macAddressPolicy;
  if (policy === 'persistent') {
    return {
      rewrites: true,
      describe: 'MACAddressPolicy=persistent: replaces the random MAC with a generated one',
    };
  }
  if (link.macAddress !== undefined) {
    return { rewrites: true, describe: `MACAddress=${link.macAddress}: sets a fixed MAC` };
  }
  if (policy === 'random') {
    return {
      rewrites: false,
      describe: 'MACAddressPolicy=random: keeps a MAC the kernel already randomised',
    };
  }
  return {
    rewrites: false,
    describe:
      policy === 'none' ? 'MACAddressPolicy=none: keeps the MAC' : 'no MAC setting: keeps the MAC',
  };
}

export interface LinkEvaluation {
  device: DeviceFacts;
  /** Every .link file in name order, with its match outcome. */
  files: { file: LinkFile; match: MatchOutcome }[];
  /** The file udev applies (the first that certainly matches), if any. */
  applied: LinkFile | null;
  /** Files before it that may match (unknowable parts), i.e. may be applied instead. */
  possible: LinkFile[];
}

/** All .link files under the root. */
export function loadLinkFiles(fs: FsRoot): LinkFile[] {
  return fs.confFiles(NETWORK_DIRS, '.link').map((file) => loadLinkFile(fs, file));
}

export function evaluateLinkFiles(
  files: readonly LinkFile[],
  device: DeviceFacts,
  host: HostFacts,
): LinkEvaluation {
  const evaluation: LinkEvaluation = { device, files: [], applied: null, possible: [] };
  for (const file of files) {
    const match = matchLink(file, device, host);
    evaluation.files.push({ file, match });
    if (evaluation.applied !== null) continue;
    if (match.result === 'yes') evaluation.applied = file;
    else if (match.result === 'unknown') evaluation.possible.push(file);
  }
  return evaluation;
}
