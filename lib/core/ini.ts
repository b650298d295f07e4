/**
 * Line-oriented parsers for the two ini dialects the doctor reads:
 *  - systemd's (systemd.syntax(7)): `#`/`;` comments, `[Section]`, `Key=Value` with both
 *    sides trimmed, a trailing backslash joins the next line (replaced by a space; comment
 *    lines inside a continuation are skipped);
 *  - GLib's key files as NetworkManager reads them: `#` comments, `[group]`, `key=value`,
 *    and NetworkManager's `key+=value` / `key-=value` list operators.
 */

export interface IniEntry {
  section: string | null;
  key: string;
  value: string;
  /** 1-based line where the assignment starts. */
  line: number;
}

export interface IniProblem {
  line: number;
  message: string;
}

export interface IniDocument {
  /** Sections in order of appearance (a section may appear more than once). */
  sections: { name: string; line: number }[];
  entries: IniEntry[];
  problems: IniProblem[];
}

/** systemd's unit-file syntax. */
export function parseSystemdIni(text: string): IniDocument {
  const document: IniDocument = { sections: [], entries: [], problems: [] };
  const lines = text.split(/\r?\n/);
  let section: string | null = null;
  for (let index = 0; index < lines.length; index += 1) {
    const start = index + 1;
    let line = (lines[index] ?? '').trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    // Continuations: "foo \" + next line, the backslash becoming a space.
    while (line.endsWith('\\') && index + 1 < lines.length) {
      line = `${line.slice(0, -1)} `;
      index += 1;
      const next = (lines[index] ?? '').trim();
      if (next.startsWith('#') || next.startsWith(';')) {
        line = line.trimEnd() + '\\';
        continue;
      }
      line += next;
    }
    if (line.endsWith('\\')) line = line.slice(0, -1);
    if (line.startsWith('[')) {
      if (!line.endsWith(']')) {
        document.problems.push({ line: start, message: `invalid section header: ${line}` });
        continue;
      }
      section = line.slice(1, -1);
      document.sections.push({ name: section, line: start });
      continue;
    }
    const equals = line.indexOf('=');
    if (equals < 0) {
      document.problems.push({ line: start, message: `missing '=', ignoring line: ${line}` });
      continue;
    }
    if (section === null) {
      document.problems.push({ line: start, message: 'assignment outside of a section' });
      continue;
    }
    document.entries.push({
      section,
      key: line.slice(0, equals).trim(),
      value: line.slice(equals + 1).trim(),
      line: start,
    });
  }
  return document;
}

export interface KeyFileEntry extends IniEntry {
  /** NetworkManager's list operators. */
  op: '=' | '+=' | '-=';
}

export interface KeyFileDocument {
  sections: { name: string; line: number }[];
  entries: KeyFileEntry[];
  problems: IniProblem[];
}

/** GLib key file (as NetworkManager.conf uses it). */
export function parseKeyFile(text: string): KeyFileDocument {
  const document: KeyFileDocument = { sections: [], entries: [], problems: [] };
  let section: string | null = null;
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    if (line.startsWith('[') && line.endsWith(']')) {
      section = line.slice(1, -1);
      document.sections.push({ name: section, line: index + 1 });
      return;
    }
    const equals = line.indexOf('=');
    if (equals <= 0 || section === null) {
      document.problems.push({ line: index + 1, message: `ignored line: ${line}` });
      return;
    }
    let key = line.slice(0, equals).trimEnd();
    let op: KeyFileEntry['op'] = '=';
    if (key.endsWith('+') || key.endsWith('-')) {
      op = key.endsWith('+') ? '+=' : '-=';
      key = key.slice(0, -1).trimEnd();
    }
    document.entries.push({
      section,
      key,
      value: line.slice(equals + 1).trimStart(),
      line: index + 1,
      op,
    });
  });
  return document;
}

/**
 * systemd's extract_first_word() for whitespace-separated lists, with quotes removed
 * ("a b" and 'a b' are one word) and backslash escapes kept or resolved.
 */
export function splitWords(value: string, keepEscapes = true): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: string | null = null;
  for (let i = 0; i < value.length; i += 1) {
    const char = value[i] ?? '';
    if (quote !== null) {
      if (char === quote) {
        quote = null;
      } else if (char === '\\' && i + 1 < value.length) {
        i += 1;
        word += keepEscapes ? `\\${value[i] ?? ''}` : (value[i] ?? '');
      } else {
        word += char;
      }
      continue;
    }
    if (/\s/.test(char)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
      continue;
    }
    inWord = true;
    if (char === '"' || char === "'") {
      quote = char;
    } else if (char === '\\' && i + 1 < value.length) {
      i += 1;
      word += keepEscapes ? `\\${value[i] ?? ''}` : (value[i] ?? '');
    } else {
      word += char;
    }
  }
  if (inWord) words.push(word);
  return words;
}

/** NetworkManager's device-spec lists: separated by ',' or ';', backslash escapes, trimmed. */
export function splitNmList(value: string): string[] {
  const items: string[] = [];
  let item = '';
  for (let i = 0; i < value.length; i += 1) {
    const char = value[i] ?? '';
    if (char === '\\' && i + 1 < value.length) {
      i += 1;
      const next = value[i] ?? '';
      item += next === 's' ? ' ' : next === 'n' ? '\n' : next === 't' ? '\t' : next;
    } else if (char === ',' || char === ';') {
      if (item.trim() !== '') items.push(item.trim());
      item = '';
    } else {
      item += char;
    }
  }
  if (item.trim() !== '') items.push(item.trim());
  return items;
}
