/**
 * The change journal (lib/core/journal.ts) on its own: the first value before a change is kept,
 * and a journal that is not what it claims is refused whole (EINVAL), never half read.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import {
  JOURNAL_NAME,
  readJournal,
  recordFile,
  recordOffloads,
  writeJournal,
} from '../lib/core/journal';

describe('the change journal', function () {
  let dir: string;

  beforeEach(function () {
    dir = mkdtempSync(join(tmpdir(), 'fg-journal-'));
  });

  afterEach(function () {
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the first state seen before a change, per namespace and device, and each file once', function () {
    assert.deepEqual(readJournal(dir), []);
    recordOffloads(dir, 'ns1', 'flannel.1', { 'tx-checksum-ip-generic': true });
    // The device made again and turned off again: its first "before" stands.
    recordOffloads(dir, 'ns1', 'flannel.1', {
      'tx-checksum-ip-generic': false,
      'tx-tcp-segmentation': true,
    });
    recordOffloads(dir, null, 'flannel.1', { 'tx-checksum-ip-generic': true });
    const file = {
      kind: 'file' as const,
      path: '/etc/x.link',
      createdDirs: ['/etc'],
      reload: null,
    };
    recordFile(dir, { ...file, before: null, beforeMode: null, written: 'a' });
    recordFile(dir, { ...file, before: 'a', beforeMode: 0o600, written: 'b', createdDirs: [] });
    assert.deepEqual(readJournal(dir), [
      {
        kind: 'offload',
        netns: 'ns1',
        device: 'flannel.1',
        before: { 'tx-checksum-ip-generic': true, 'tx-tcp-segmentation': true },
      },
      {
        kind: 'offload',
        netns: null,
        device: 'flannel.1',
        before: { 'tx-checksum-ip-generic': true },
      },
      { ...file, before: null, beforeMode: null, written: 'b' },
    ]);
    // A file's record from before the mode was noted: put back as it was then, 0644.
    writeFileSync(
      join(dir, JOURNAL_NAME),
      '{"version":1,"records":[{"kind":"file","path":"/etc/y","before":"x","written":"z","createdDirs":[],"reload":null}]}',
    );
    assert.deepEqual(readJournal(dir), [
      {
        kind: 'file',
        path: '/etc/y',
        before: 'x',
        beforeMode: 0o644,
        written: 'z',
        createdDirs: [],
        reload: null,
      },
    ]);
  });

  it('refuses a journal that is not what it claims, whole, with EINVAL', function () {
    const path = join(dir, JOURNAL_NAME);
    for (const text of [
      'not json',
      '{}',
      '{"version":2,"records":[]}',
      '{"version":1,"records":{}}',
      '{"version":1,"records":[{"kind":"offload","netns":null,"device":"","before":{}}]}',
      '{"version":1,"records":[{"kind":"offload","netns":null,"device":"f","before":{"x":1}}]}',
      '{"version":1,"records":[{"kind":"file","path":"rel","before":null,"written":"","createdDirs":[],"reload":null}]}',
      '{"version":1,"records":[{"kind":"route"}]}',
      // A mode that chmod would not take, or one for a file that was not there.
      ...['-1', '4096', '1.5', '"420"', 'null'].map(
        (mode) =>
          `{"version":1,"records":[{"kind":"file","path":"/a","before":"x","beforeMode":${mode},"written":"","createdDirs":[],"reload":null}]}`,
      ),
      '{"version":1,"records":[{"kind":"file","path":"/a","before":null,"beforeMode":420,"written":"","createdDirs":[],"reload":null}]}',
      `{"version":1,"records":[${Array(4097).fill('{"kind":"offload","netns":null,"device":"f","before":{}}').join(',')}]}`,
    ]) {
      writeFileSync(path, text);
      assert.throws(
        () => readJournal(dir),
        (error: NodeJS.ErrnoException) => error.code === 'EINVAL',
        text.slice(0, 60),
      );
    }
    rmSync(path);
    symlinkSync('/etc/passwd', path);
    assert.throws(
      () => readJournal(dir),
      (error: NodeJS.ErrnoException) => error.code === 'EINVAL',
    );
    rmSync(path);
    writeJournal(dir, []);
    assert.deepEqual(readJournal(dir), []);
  });

  it('never writes a journal it would refuse to read: EINVAL, and the one there stays', function () {
    const offload = (device: string) => ({
      kind: 'offload' as const,
      netns: null,
      device,
      before: { 'tx-checksum-ip-generic': true },
    });
    writeJournal(dir, [offload('f0')]);
    const kept = readFileSync(join(dir, JOURNAL_NAME), 'utf8');
    const refused = (records: Parameters<typeof writeJournal>[1], why: RegExp) => {
      assert.throws(
        () => writeJournal(dir, records),
        (error: NodeJS.ErrnoException) => error.code === 'EINVAL' && why.test(error.message),
      );
      assert.equal(readFileSync(join(dir, JOURNAL_NAME), 'utf8'), kept);
    };
    // One record too many: once the newest was cut silently, a change undo never heard of.
    refused(
      Array.from({ length: 4097 }, (_, i) => offload(`f${i}`)),
      /more than 4096 records/,
    );
    // A file's text that JSON escapes six times over (control bytes): past the bytes cap.
    const file = {
      kind: 'file' as const,
      path: '/etc/x.conf',
      before: '\u0001'.repeat(1024 * 1024),
      beforeMode: 0o644,
      written: 'a',
      createdDirs: [],
      reload: null,
    };
    refused([file], /over 4194304 bytes/);
    assert.throws(
      () => recordFile(dir, file),
      (error: NodeJS.ErrnoException) => error.code === 'EINVAL',
    );
    assert.deepEqual(readJournal(dir), [offload('f0')]);
    // At the caps, it is written and reads back.
    const full = Array.from({ length: 4096 }, (_, i) => offload(`f${i}`));
    writeJournal(dir, full);
    assert.deepEqual(readJournal(dir), full);
  });
});
