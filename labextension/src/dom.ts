/**
 * What the timeline's views share: element helpers, the outcome colours, and the
 * look-ups every part makes in the snapshot on show.
 */

import { shortId } from './format';
import { Snapshot, TimelineEvent } from './types';

export const OUTCOME_COLOURS: Record<string, string> = {
  executed: '#2f6fbd',
  restored: '#2e9e57',
  resumed: '#7a4fb5',
  incomplete: '#e08a1e',
  failed: '#c83b3b',
  uncached: '#8a8f98'
};

export function outcomeColour(outcome: string): string {
  return OUTCOME_COLOURS[outcome] ?? OUTCOME_COLOURS.uncached;
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** One `label | value` row of a facts table. */
export function factRow(label: string, value: string): HTMLTableRowElement {
  const row = el('tr');
  row.append(el('th', undefined, label), el('td', undefined, value || '—'));
  return row;
}

/** A coloured dot for an outcome, as the strip draws it. */
export function outcomeDot(outcome: string): HTMLSpanElement {
  const dot = el('span', 'ipr-dot');
  dot.style.background = outcomeColour(outcome);
  return dot;
}

/** The look-ups the parts make in one snapshot, built once when it changes. */
export class SnapshotIndex {
  readonly snapshot: Snapshot | null;
  private readonly unavailable: Set<string>;

  constructor(snapshot: Snapshot | null) {
    this.snapshot = snapshot;
    this.unavailable = new Set(snapshot?.unavailable ?? []);
  }

  /** The displayed prefix of an id, as the kernel sent it with the snapshot. */
  shortId(id: string | null): string {
    return shortId(id, this.snapshot?.short_ids);
  }

  /** Whether `event`'s checkpoint is no longer in the store (gc, deleted, untrusted). */
  isGone(event: TimelineEvent): boolean {
    return event.checkpoint_id !== null && this.unavailable.has(event.checkpoint_id);
  }
}
