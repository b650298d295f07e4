/** The installed package's version (package.json at the package's root), for `--version`. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export function packageVersion(): string {
  const manifest = JSON.parse(
    readFileSync(join(__dirname, '..', '..', '..', 'package.json'), 'utf8'),
  ) as { version: string };
  return manifest.version;
}
