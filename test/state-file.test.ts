/**
 * The crash-state file (lib/guard/state-file.ts) as untrusted input: a save reads
 * back as it was; seeded random damage to a valid file is either refused
 * whole with an Error or yields only entries that pass every check; files of
 * dead namespaces are pruned, live ones and our own never.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import {
  MAX_STATE_BYTES,
  STALE_AFTER_MS,
  StateFile,
  parseState,
  type PersistedDevice,
} from '../lib/guard/state-file';
import { DeviceStateStore, type DeviceStateDeps } from '../lib/guard/device-state-store';
import { ipVersion, parseMac } from '../lib/core/validate';
import { prng } from './support/prng';
import { tempDirPrefix } from './support/netns';

const DEVICE: PersistedDevice = {
  name: 'flannel.1',
  ifindex: 7,
  pin: '0e:00:00:00:00:01',
  pinKind: 'first-seen',
  neighbours: [
    {
      family: 'inet',
      ifindex: 7,
      destination: '198.18.1.0',
      lladdr: '0e:00:00:00:01:01',
      state: 0x80,
      states: ['permanent'],
      permanent: true,
      flags: 0,
      vni: null,
      master: null,
    },
    {
      family: 'inet6',
      ifindex: 7,
      destination: 'fd00::1',
      lladdr: '0e:00:00:00:01:02',
      state: 0x80,
      states: ['permanent'],
      permanent: true,
      flags: 0,
      vni: null,
      master: null,
    },
  ],
};

describe('the crash-state file (pure, fuzzed)', function () {
  let dir: string;

  beforeEach(function () {
    dir = mkdtempSync(tempDirPrefix('statefile'));
  });

  afterEach(function () {
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads back what it saved, for its own namespace only', function () {
    const file = new StateFile(dir, '42', 4026531840);
    file.save([DEVICE]);
    assert.deepEqual([...file.load().values()], [DEVICE]);
    assert.deepEqual([...new StateFile(dir, '43', 4026531840).load().values()], []);
    const text = JSON.stringify({ version: 1, netnsCookie: '42', devices: [DEVICE] });
    assert.throws(() => parseState(text, '43'), /another network namespace/);
  });

  it('seeded damage: refused whole (an Error) or every entry still valid', function () {
    const file = new StateFile(dir, '42', 1);
    file.save([DEVICE]);
    const valid = JSON.stringify({ version: 1, netnsCookie: '42', devices: [DEVICE] });
    const random = prng(0x57a7e);
    const junk = [
      '"',
      '{',
      '}',
      '[',
      ']',
      ',',
      ':',
      '0',
      '-1',
      'null',
      'true',
      '"ff:ff:ff:ff:ff:ff"',
      '1e309',
      '"x"',
      ' ',
    ];
    let refused = 0;
    for (let i = 0; i < 3000; i += 1) {
      let text = valid;
      for (let edits = 1 + Math.floor(random() * 3); edits > 0; edits -= 1) {
        const at = Math.floor(random() * text.length);
        const cut = Math.floor(random() * 6);
        text = `${text.slice(0, at)}${junk[Math.floor(random() * junk.length)] ?? ''}${text.slice(at + cut)}`;
      }
      let devices: PersistedDevice[];
      try {
        devices = parseState(text, '42');
      } catch (error) {
        assert.ok(error instanceof Error, `${typeof error} thrown`);
        refused += 1;
        continue;
      }
      for (const device of devices) {
        assert.ok(Number.isInteger(device.ifindex) && device.ifindex > 0);
        if (device.pin !== null) assert.equal(parseMac(device.pin), device.pin);
        for (const entry of device.neighbours) {
          assert.equal(parseMac(entry.lladdr), entry.lladdr);
          assert.equal(ipVersion(entry.destination ?? ''), entry.family === 'inet' ? 4 : 6);
          assert.equal(entry.permanent, true);
        }
      }
    }
    assert.ok(refused > 1000 && refused < 3000, `${refused} of 3000 refused`);
  });

  it('refuses a file past the size cap, and a device with more entries than the cap', function () {
    const file = new StateFile(dir, '42', 1);
    writeFileSync(file.path, Buffer.alloc(MAX_STATE_BYTES + 1, ' '));
    assert.throws(() => file.load(), /larger than/);
    const many = { ...DEVICE, neighbours: new Array(20_001).fill(DEVICE.neighbours[0]) };
    assert.throws(
      () => parseState(JSON.stringify({ version: 1, netnsCookie: '42', devices: [many] }), '42'),
      /at most 20000/,
    );
  });

  it('prunes the old files of namespaces that are gone; keeps live ones, its own and new ones', function () {
    const own = new StateFile(dir, '1', 100);
    own.save([]);
    const names = ['net-2-200.json', 'net-3-300.json', 'net-4-400.json', 'other.json'];
    for (const name of names) writeFileSync(join(dir, name), '{}');
    const old = new Date(Date.now() - 3600_000);
    for (const name of ['net-2-200.json', 'net-3-300.json', own.name, 'other.json']) {
      utimesSync(join(dir, name), old, old);
    }
    own.pruneStale(new Set([300]));
    assert.deepEqual(
      readdirSync(dir).sort(),
      [own.name, 'net-3-300.json', 'net-4-400.json', 'other.json'].sort(),
    );
  });

  it('a running guard keeps its file young and prunes the gone ones every so often; closed, it stops', function () {
    const own = new StateFile(dir, '1', 100);
    own.save([]);
    const old = new Date(Date.now() - 3600_000);
    writeFileSync(join(dir, 'net-2-200.json'), '{}');
    for (const name of [own.name, 'net-2-200.json']) utimesSync(join(dir, name), old, old);
    const timers: { at: number; fire: () => void }[] = [];
    let now = 0;
    const clock: DeviceStateDeps['clock'] = {
      now: () => now,
      setTimeout(fire, ms) {
        const timer = { at: now + ms, fire };
        timers.push(timer);
        return () => timers.splice(timers.indexOf(timer), 1);
      },
    };
    const advance = (ms: number): void => {
      now += ms;
      for (const timer of timers.filter((t) => t.at <= now)) {
        timers.splice(timers.indexOf(timer), 1);
        timer.fire();
      }
    };
    const store = new DeviceStateStore({
      file: own,
      clock,
      dryRun: false,
      fail: (error) => assert.fail(String(error)),
      // The sweep reads neither (no save is made here).
      devices: undefined as unknown as DeviceStateDeps['devices'],
      monitor: undefined as unknown as DeviceStateDeps['monitor'],
    });
    advance(STALE_AFTER_MS / 4 - 1);
    assert.ok(readdirSync(dir).includes('net-2-200.json'), 'not yet');
    advance(1);
    assert.deepEqual(readdirSync(dir), [own.name], "the gone namespace's file pruned");
    assert.ok(Date.now() - statSync(own.path).mtimeMs < 60_000, 'its own file made young');
    utimesSync(own.path, old, old);
    store.close();
    advance(STALE_AFTER_MS);
    assert.equal(timers.length, 0, 'no sweep after close');
    assert.ok(Date.now() - statSync(own.path).mtimeMs > 3000_000, 'nor a touch');
  });
});
