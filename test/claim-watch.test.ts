/**
 * The native ClaimWatch (native/addon/claim_watch_wrap.h) over real claims: abstract unix sockets
 * in this process's own namespace, under names of this test's own. It counts the guards joined
 * to a held name, and sees a holder's end, on the loop; it takes only a claim's socket, keeps
 * no descriptor once closed, never keeps the loop alive, and lets a throwing listener be an
 * ordinary uncaught exception. No root needed.
 */
import assert from 'node:assert/strict';
import { closeSync, fstatSync, openSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import { binding } from '../lib/core/binding';
import { jsonLines, runCommand, startCommand } from './support/node-child';
import { waitFor } from './support/netns';

const CHILD = join(__dirname, 'support', 'claim-watch-child.js');
/** The guards a holder keeps connected (kMaxPeers). */
const MAX_PEERS = 64;

let serial = 0;
function uniqueName(): string {
  serial += 1;
  return `flannel-guard-test/${process.pid}/watch-${serial}`;
}

function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/** A watched claim and the counts it reported. */
interface Watched {
  watch: { close(): void };
  held: boolean;
  reports: number[];
}

describe('ClaimWatch (real abstract sockets, own namespace)', function () {
  const open: { close(): void }[] = [];

  afterEach(function () {
    for (const watch of open.splice(0)) watch.close();
  });

  function claimAndWatch(name: string): Watched {
    const claim = binding.claimName(name);
    assert.ok(claim.fd >= 0, 'claimed');
    const reports: number[] = [];
    const watch = new binding.ClaimWatch(claim.fd, claim.held, (others) => reports.push(others));
    open.push(watch);
    return { watch, held: claim.held, reports };
  }

  it('the holder counts each guard that joins and each that goes; a joined one sees the holder go', async function () {
    const name = uniqueName();
    const holder = claimAndWatch(name);
    assert.equal(holder.held, true);
    const joined = [claimAndWatch(name), claimAndWatch(name)];
    assert.deepEqual(
      joined.map((j) => j.held),
      [false, false],
    );
    await waitFor(() => holder.reports.at(-1) === 2, { timeoutMs: 5000, what: 'two joined' });
    joined[0]?.watch.close();
    await waitFor(() => holder.reports.at(-1) === 1, { timeoutMs: 5000, what: 'one went' });
    holder.watch.close();
    await waitFor(() => joined[1]?.reports.at(-1) === 0, { timeoutMs: 5000, what: 'holder went' });
    assert.deepEqual(joined[1]?.reports, [0], 'a joined guard hears only the end');
    assert.deepEqual(joined[0]?.reports, [], 'a closed watch hears nothing');
    assert.ok(holder.reports.every((n) => n >= 0 && n <= 2));
  });

  it(`keeps at most ${MAX_PEERS} guards joined: one more is closed at once, and the count stays`, async function () {
    const name = uniqueName();
    const holder = claimAndWatch(name);
    // Joined one at a time, each accepted before the next: the queue never fills.
    const joined: Watched[] = [];
    for (let i = 0; i < MAX_PEERS + 1; i += 1) {
      joined.push(claimAndWatch(name));
      const expected = Math.min(i + 1, MAX_PEERS);
      await waitFor(() => holder.reports.at(-1) === expected, {
        timeoutMs: 5000,
        what: `${expected} joined`,
      });
      if (i === MAX_PEERS) {
        await waitFor(() => joined.at(-1)?.reports.at(-1) === 0, {
          timeoutMs: 5000,
          what: 'the one past the cap is closed',
        });
      }
    }
    assert.equal(Math.max(...holder.reports), MAX_PEERS);
    for (const j of joined.slice(0, 10)) j.watch.close();
    await waitFor(() => holder.reports.at(-1) === MAX_PEERS - 10, {
      timeoutMs: 5000,
      what: 'ten went',
    });
  });

  it('a joined guard that sends bytes (a flood, then its end) is counted until its end', async function () {
    const name = uniqueName();
    const holder = claimAndWatch(name);
    // A raw claim: its socket is this test's to write to.
    const raw = binding.claimName(name);
    await waitFor(() => holder.reports.at(-1) === 1, { timeoutMs: 5000, what: 'joined' });
    const chunk = Buffer.alloc(64 * 1024, 0x78);
    let sent = 0;
    for (let i = 0; i < 64; i += 1) {
      const wrote = binding.writeNoWait(raw.fd, chunk);
      if (wrote < 0) break; // its buffer is full: the holder reads it in bounded turns
      sent += wrote;
    }
    assert.ok(sent > 0, 'some bytes went');
    // Another guard joins behind the flood: heard once the holder's loop has turned past it.
    claimAndWatch(name);
    await waitFor(() => holder.reports.at(-1) === 2, { timeoutMs: 5000, what: 'a second joined' });
    assert.deepEqual(holder.reports, [1, 2], 'bytes are not an end');
    closeSync(raw.fd);
    await waitFor(() => holder.reports.at(-1) === 1, { timeoutMs: 5000, what: 'its end' });
    assert.deepEqual(holder.reports, [1, 2, 1]);
  });

  it('takes only a claim socket of its kind: EINVAL (getsockopt), the descriptor left as it was', function () {
    const name = uniqueName();
    const held = binding.claimName(name);
    const joined = binding.claimName(name);
    const readEnd = openSync('/dev/null', 'r');
    try {
      for (const [fd, asHeld] of [
        [readEnd, false],
        [held.fd, false],
        [joined.fd, true],
        [-1, false],
        [2 ** 31, true],
      ] as const) {
        assert.throws(
          () => new binding.ClaimWatch(fd, asHeld, () => undefined),
          (error: NodeJS.ErrnoException) =>
            error.code === 'EINVAL' && error.errno === -22 && error.syscall === 'getsockopt',
          `fd ${fd} as ${asHeld ? 'held' : 'joined'}`,
        );
      }
      for (const fd of [readEnd, held.fd, joined.fd]) fstatSync(fd); // still open
      assert.throws(() => new binding.ClaimWatch(held.fd, true, undefined as never), TypeError);
    } finally {
      for (const fd of [readEnd, held.fd, joined.fd]) closeSync(fd);
    }
  });

  it('200 claim, join, watch and close cycles leave no descriptor behind; close() twice is fine', async function () {
    const before = openFds();
    for (let i = 0; i < 200; i += 1) {
      const name = uniqueName();
      const holder = claimAndWatch(name);
      const joined = claimAndWatch(name);
      if (i % 20 === 0) {
        await waitFor(() => holder.reports.at(-1) === 1, { timeoutMs: 5000, what: 'joined' });
      }
      joined.watch.close();
      holder.watch.close();
      holder.watch.close();
    }
    open.splice(0);
    // libuv closes the handles (and the descriptors) on its next turns.
    await waitFor(() => openFds() <= before, {
      timeoutMs: 10_000,
      what: `descriptors back to ${before} (now ${openFds()})`,
    });
  });

  describe('in a process of its own', function () {
    it('open watches do not keep the loop alive', async function () {
      const child = startCommand([process.execPath, CHILD, 'open', uniqueName()], {
        timeoutMs: 20_000,
      });
      const result = await child.exited;
      assert.equal(result.timedOut, false, 'the process ended by itself');
      assert.equal(result.code, 0, result.stderr);
      assert.deepEqual(jsonLines(result.stdout), [{ what: 'ready' }]);
    });

    it('a throwing listener is an ordinary uncaught exception, once', async function () {
      const result = await runCommand([process.execPath, CHILD, 'throw', uniqueName()]);
      assert.equal(result.signal, null, result.stderr);
      assert.equal(result.code, 0, result.stderr);
      assert.deepEqual(jsonLines(result.stdout), [
        { what: 'uncaught', calls: 1, same: true, message: 'boom' },
      ]);
    });

    it('a worker terminated while its watches are open tears them down: no crash', async function () {
      const result = await runCommand([process.execPath, CHILD, 'worker', uniqueName()]);
      assert.equal(result.signal, null, result.stderr);
      assert.equal(result.code, 0, result.stderr);
      assert.deepEqual(jsonLines(result.stdout).at(-1), { what: 'terminated' });
    });
  });
});
