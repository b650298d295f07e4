/**
 * The three pattern languages the doctor evaluates:
 *  - fnmatch(3) with flags 0, as systemd's [Match] globs use it: `*`, `?`, bracket
 *    expressions (`[a-z]`, `[!x]`, `[^x]`), backslash escapes; `*` also matches '/';
 *  - udev rule values: fnmatch alternatives separated by `|`;
 *  - NetworkManager's interface-name globs: only `*` and `?`.
 */

const cache = new Map<string, RegExp>();

function escapeRegExp(char: string): string {
  return char.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

/** Compiles an fnmatch(3) pattern (flags 0) to an anchored regular expression. */
export function fnmatchRegExp(pattern: string): RegExp {
  const cached = cache.get(pattern);
  if (cached) return cached;
  let source = '';
  for (let i = 0; i < pattern.length; i += 1) {
    const char = pattern[i] ?? '';
    if (char === '*') {
      source += '[\\s\\S]*';
    } else if (char === '?') {
      source += '[\\s\\S]';
    } else if (char === '\\' && i + 1 < pattern.length) {
      i += 1;
      source += escapeRegExp(pattern[i] ?? '');
    } else if (char === '[') {
      const bracket = parseBracket(pattern, i);
      if (bracket === null) {
        source += '\\[';
      } else {
        source += bracket.source;
        i = bracket.end;
      }
    } else {
      source += escapeRegExp(char);
    }
  }
  const regex = new RegExp(`^${source}$`);
  if (cache.size > 1000) cache.clear();
  cache.set(pattern, regex);
  return regex;
}

/** A bracket expression starting at `start` ('['), or null when it is not closed. */
function parseBracket(pattern: string, start: number): { source: string; end: number } | null {
  let i = start + 1;
  let negate = false;
  if (pattern[i] === '!' || pattern[i] === '^') {
    negate = true;
    i += 1;
  }
  let body = '';
  let first = true;
  for (; i < pattern.length; i += 1) {
    const char = pattern[i] ?? '';
    if (char === ']' && !first) {
      return { source: `[${negate ? '^' : ''}${body}]`, end: i };
    }
    first = false;
    if (char === '\\' && i + 1 < pattern.length) {
      i += 1;
      body += escapeRegExp(pattern[i] ?? '');
    } else if (char === '-' && body !== '' && pattern[i + 1] !== ']' && i + 1 < pattern.length) {
      body += '-';
    } else {
      body += escapeRegExp(char);
    }
  }
  return null;
}

/** fnmatch(pattern, string, 0) === 0 */
export function fnmatch(pattern: string, value: string): boolean {
  return fnmatchRegExp(pattern).test(value);
}

/** A udev rule value: `a|b|c` alternatives, each an fnmatch pattern. */
export function udevMatch(pattern: string, value: string): boolean {
  return pattern.split('|').some((alternative) => fnmatch(alternative, value));
}

/** NetworkManager's interface-name globbing: `*` and `?` only, no ranges or escapes. */
export function nmGlob(pattern: string, value: string): boolean {
  const source = pattern
    .split('')
    .map((char) => (char === '*' ? '[\\s\\S]*' : char === '?' ? '[\\s\\S]' : escapeRegExp(char)))
    .join('');
  return new RegExp(`^${source}$`).test(value);
}
