/**
 * udev rules that touch the VXLAN device: every `*.rules` file in /etc, /run, /usr/local/lib,
 * /usr/lib and /lib `udev/rules.d` (same-name replacement and masking as for .link files),
 * each rule's match keys evaluated against the device's `add` event as far as they can be
 * known here, and its assignments classified.
 */
import { udevMatch } from '../core/glob';
import { UDEV_RULES_DIRS, type FsRoot } from '../core/fsroot';
import type { DeviceFacts, Tristate } from '../udev/link-files';

export interface UdevToken {
  key: string;
  attr: string | null;
  op: '==' | '!=' | '=' | '+=' | '-=' | ':=';
  value: string;
}

export interface UdevRule {
  file: string;
  line: number;
  text: string;
  tokens: UdevToken[];
}

export type RuleEffect =
  | 'sets-mac'
  | 'runs-mac-change'
  | 'runs-offload-change'
  | 'renames'
  | 'nm-unmanaged'
  | 'nm-managed'
  | 'runs-program'
  | 'applies-link-files'
  | 'other';

export interface RuleFinding {
  rule: UdevRule;
  match: Tristate;
  /** The rule names the device specifically (not a catch-all for every net device). */
  specific: boolean;
  effects: RuleEffect[];
}

const TOKEN = /\s*([A-Za-z_]+)(?:\{([^}]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?/y;

/** Splits a rules file into rules (continuation lines joined) and their tokens. */
export function parseRules(file: string, text: string): UdevRule[] {
  const rules: UdevRule[] = [];
  const lines = text.split('\n');
  for (let index = 0; index < lines.length; index += 1) {
    const start = index + 1;
    let line = (lines[index] ?? '').trim();
    while (line.endsWith('\\') && index + 1 < lines.length) {
      index += 1;
      line = `${line.slice(0, -1)} ${(lines[index] ?? '').trim()}`;
    }
    if (line === '' || line.startsWith('#')) continue;
    const tokens: UdevToken[] = [];
    TOKEN.lastIndex = 0;
    let match: RegExpExecArray | null;
    while (TOKEN.lastIndex < line.length && (match = TOKEN.exec(line)) !== null) {
      tokens.push({
        key: (match[1] ?? '').toUpperCase(),
        attr: match[2] ?? null,
        op: match[3] as UdevToken['op'],
        value: (match[4] ?? '').replace(/\\"/g, '"'),
      });
    }
    if (tokens.length > 0) rules.push({ file, line: start, text: line, tokens });
  }
  return rules;
}

/** All rules under the root, in the order udev reads them. */
export function loadRules(fs: FsRoot): UdevRule[] {
  const rules: UdevRule[] = [];
  for (const file of fs.confFiles(UDEV_RULES_DIRS, '.rules')) {
    if (file.masked || file.unreadable) continue;
    const text = fs.readText(file.path);
    if (text !== null) rules.push(...parseRules(file.path, text));
  }
  return rules;
}

const SPECIFIC_KEYS = new Set(['KERNEL', 'KERNELS', 'DEVPATH', 'DRIVER']);
const SPECIFIC_ENV = new Set(['INTERFACE', 'DEVTYPE', 'ID_NET_DRIVER']);
const SPECIFIC_ATTR = new Set(['address', 'type']);

/** The value of a match key for the device's add event; undefined when not knowable. */
function knownValue(token: UdevToken, device: DeviceFacts): string | undefined {
  switch (token.key) {
    case 'ACTION':
      return 'add';
    case 'SUBSYSTEM':
    case 'SUBSYSTEMS':
      return 'net';
    case 'KERNEL':
    case 'KERNELS':
      return device.name;
    case 'NAME':
      return ''; // not named by a rule yet
    case 'DEVPATH':
      return `/devices/virtual/net/${device.name}`;
    case 'DRIVER':
    case 'DRIVERS':
      return ''; // a virtual device has no bound driver
    case 'ENV':
      if (token.attr === 'INTERFACE') return device.name;
      if (token.attr === 'DEVTYPE') return device.type ?? undefined;
      if (token.attr === 'ID_NET_DRIVER') return device.driver ?? undefined;
      return undefined;
    case 'ATTR':
    case 'ATTRS':
      if (token.attr === 'type') return '1';
      if (token.attr === 'address') return device.mac ?? undefined;
      return undefined;
    default:
      return undefined;
  }
}

function isCatchAll(value: string): boolean {
  return value.split('|').every((alternative) => /^[*?]*$/.test(alternative));
}

function classify(token: UdevToken): RuleEffect | null {
  if (token.op === '==' || token.op === '!=') return null;
  const value = token.value;
  if (token.key === 'ATTR' && token.attr === 'address') return 'sets-mac';
  if (token.key === 'NAME') return 'renames';
  if (token.key === 'ENV' && token.attr === 'NM_UNMANAGED') {
    return value === '1' ? 'nm-unmanaged' : 'nm-managed';
  }
  if (token.key === 'IMPORT' && token.attr === 'builtin' && value.startsWith('net_setup_link')) {
    return 'applies-link-files';
  }
  if (token.key === 'RUN' || token.key === 'PROGRAM') {
    if (
      /\bmacchanger\b/.test(value) ||
      /\bip\b.*\blink\b.*\bset\b.*\b(address|addr)\b/.test(value)
    ) {
      return 'runs-mac-change';
    }
    if (/\bethtool\b.*\s(-K|--features|--offload)\b/.test(value)) return 'runs-offload-change';
    return 'runs-program';
  }
  return 'other';
}

/** How the rule relates to the device's add event. */
export function evaluateRule(rule: UdevRule, device: DeviceFacts): RuleFinding {
  let match: Tristate = 'yes';
  let specific = false;
  const effects = new Set<RuleEffect>();
  for (const token of rule.tokens) {
    if (token.op !== '==' && token.op !== '!=') {
      const effect = classify(token);
      if (effect) effects.add(effect);
      continue;
    }
    const value = knownValue(token, device);
    if (value === undefined || /[$%]/.test(token.value)) {
      if (match === 'yes') match = 'unknown';
      continue;
    }
    const hit = udevMatch(token.value, value);
    if (hit !== (token.op === '==')) {
      match = 'no';
      break;
    }
    const specificKey =
      SPECIFIC_KEYS.has(token.key) ||
      (token.key === 'ENV' && SPECIFIC_ENV.has(token.attr ?? '')) ||
      ((token.key === 'ATTR' || token.key === 'ATTRS') && SPECIFIC_ATTR.has(token.attr ?? ''));
    if (token.op === '==' && specificKey && !isCatchAll(token.value) && value !== '') {
      specific = true;
    }
  }
  return { rule, match, specific, effects: [...effects] };
}

/** Rules that may act on the device: specific ones, and any that would change its MAC. */
export function rulesTouching(rules: readonly UdevRule[], device: DeviceFacts): RuleFinding[] {
  return rules
    .map((rule) => evaluateRule(rule, device))
    .filter(
      (finding) =>
        finding.match !== 'no' &&
        finding.effects.length > 0 &&
        (finding.specific ||
          finding.effects.includes('sets-mac') ||
          finding.effects.includes('runs-mac-change')),
    );
}
