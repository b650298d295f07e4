/**
 * OtherGuards over the real claim (an abstract unix socket in this process's own namespace,
 * under device names of this test's own): guards learn of each other at once, and of each
 * other's going, whichever goes first. No root needed.
 */
import assert from 'node:assert/strict';

import { binding } from '../lib/core/binding';
import type { SharedEvent } from '../lib/guard';
import { OtherGuards } from '../lib/guard/other-guards';
import { waitFor } from './support/netns';

let serial = 0;

/** A guard's OtherGuards and what it said. */
function guardOf(): { others: OtherGuards; said: SharedEvent[] } {
  const said: SharedEvent[] = [];
  const others = new OtherGuards(
    {
      claim: (name) => binding.claimName(name),
      watch: (claim, onOthers) => new binding.ClaimWatch(claim.fd, claim.held, onOthers),
    },
    (_event, payload) => said.push(payload),
  );
  return { others, said };
}

describe('OtherGuards (real abstract sockets, own namespace)', function () {
  let device: string;
  const open: OtherGuards[] = [];

  beforeEach(function () {
    serial += 1;
    device = `t${process.pid}-${serial}`;
  });

  afterEach(function () {
    for (const others of open.splice(0)) others.close();
  });

  function guard(): ReturnType<typeof guardOf> {
    const made = guardOf();
    open.push(made.others);
    return made;
  }

  /** Waits until `holder` counts `count` other guards on the device. */
  async function joined(holder: OtherGuards, count: number, what: string): Promise<void> {
    await waitFor(() => holder.others(device) === count, { timeoutMs: 2000, what });
  }

  /** Waits until a guard has said `count` things. */
  async function told(said: readonly SharedEvent[], count: number, what: string): Promise<void> {
    await waitFor(() => said.length === count, { timeoutMs: 2000, what });
  }

  it('alone: holds the name, says nothing', async function () {
    const a = guard();
    a.others.watch(device);
    a.others.watch(device); // once per name
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(a.others.others(device), 0);
    assert.deepEqual(a.said, []);
  });

  it('a second guard: both say once that the device is shared; a third is counted by the holder', async function () {
    const a = guard();
    const b = guard();
    a.others.watch(device);
    b.others.watch(device);
    assert.equal(b.others.others(device), 1, 'the one that joins knows at once');
    await joined(a.others, 1, 'the holder');
    const c = guard();
    c.others.watch(device);
    await joined(a.others, 2, 'the third');
    assert.deepEqual(
      [a.said, b.said, c.said].map((said) => said.map((e) => `${e.device} ${e.others}`)),
      [[`${device} 1`], [`${device} 1`], [`${device} 1`]],
    );
  });

  it('the holder goes: the other takes the name and says it is alone; a newcomer then joins it', async function () {
    const a = guard();
    const b = guard();
    a.others.watch(device);
    b.others.watch(device);
    await joined(a.others, 1, 'the holder');
    a.others.close();
    await told(b.said, 2, 'b alone');
    assert.equal(b.said[1]?.others, 0);
    const c = guard();
    c.others.watch(device);
    assert.equal(c.others.others(device), 1);
    await joined(b.others, 1, 'b holds');
  });

  it('the one that joined goes: the holder says it is alone again', async function () {
    const a = guard();
    const b = guard();
    a.others.watch(device);
    b.others.watch(device);
    await joined(a.others, 1, 'the holder');
    b.others.close();
    await told(a.said, 2, 'a alone');
    assert.deepEqual(
      a.said.map((e) => e.others),
      [1, 0],
    );
    assert.deepEqual(
      b.said.map((e) => e.others),
      [1],
      'a closed guard says nothing more',
    );
  });

  it('other devices and names are separate claims', async function () {
    const a = guard();
    const b = guard();
    a.others.watch(`${device}-x`);
    b.others.watch(`${device}-y`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(a.others.others(`${device}-x`), 0);
    assert.equal(b.others.others(`${device}-y`), 0);
  });
});
