/**
 * The event list: one row per event, grouped under a header per kernel session.
 * Virtualised: only the rows in view (and a few around them) exist in the DOM, so
 * 10,000 events stay cheap. It follows the newest row until the user scrolls up.
 */

import { SnapshotIndex, el, outcomeDot } from './dom';
import { formatBytes, formatClock, formatDay, formatDuration } from './format';
import { Snapshot, TimelineEvent, ViewState } from './types';

const ROW_HEIGHT = 26;
const OVERSCAN = 8;

type Header = { kind: 'header'; session: string; first: TimelineEvent; count: number };
type Item = Header | { kind: 'row'; event: TimelineEvent };

function buildItems(events: TimelineEvent[]): Item[] {
  const items: Item[] = [];
  let header: Header | null = null;
  for (const event of events) {
    if (!header || header.session !== event.session) {
      header = { kind: 'header', session: event.session, first: event, count: 0 };
      items.push(header);
    }
    header.count += 1;
    items.push({ kind: 'row', event });
  }
  return items;
}

function headerRow(item: Header): HTMLDivElement {
  const row = el('div', 'ipr-session');
  row.dataset.session = item.session;
  const when = `${formatDay(item.first.started)} ${formatClock(item.first.started)}`;
  row.textContent = `kernel session ${item.session.slice(0, 8)} · ${when} · ${item.count} event${item.count === 1 ? '' : 's'}`;
  return row;
}

/**
 * The list; `select` runs when a row is clicked.
 *
 * ```ts
 * const list = new EventList(seq => select(seq), { maxHeight: 320 });
 * parent.append(list.node);
 * list.update(state, new SnapshotIndex(state.snapshot));
 * ```
 */
export class EventList {
  readonly node: HTMLDivElement;
  private readonly spacer: HTMLDivElement;
  private readonly select: (seq: number) => void;
  private readonly maxHeight: number | null;
  private state: ViewState | null = null;
  private index = new SnapshotIndex(null);
  private items: Item[] = [];
  private itemsFor: Snapshot | null = null;
  private rowNodes = new Map<number, HTMLDivElement>();
  private rowsFor: Item[] | null = null;
  private stickToBottom = true;

  /**
   * `maxHeight`: grow with the rows up to this many pixels (the widget, inside a
   * notebook); without it the list fills its container (the panel).
   */
  constructor(select: (seq: number) => void, options: { maxHeight?: number } = {}) {
    this.select = select;
    this.maxHeight = options.maxHeight ?? null;
    this.node = el('div', 'ipr-list');
    this.node.setAttribute('role', 'list');
    this.spacer = el('div', 'ipr-spacer');
    this.node.append(this.spacer);
    this.node.addEventListener('scroll', () => {
      const list = this.node;
      this.stickToBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - ROW_HEIGHT;
      this.renderRows();
    });
  }

  update(state: ViewState, index: SnapshotIndex): void {
    this.state = state;
    this.index = index;
    if (state.snapshot !== this.itemsFor) {
      this.itemsFor = state.snapshot;
      this.items = buildItems(state.snapshot?.events ?? []);
    }
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    if (this.maxHeight !== null) {
      const wanted = Math.max(ROW_HEIGHT * 3, this.items.length * ROW_HEIGHT + 2);
      this.node.style.height = `${Math.min(this.maxHeight, wanted)}px`;
    }
    if (this.stickToBottom) {
      this.node.scrollTop = this.node.scrollHeight;
    }
    this.renderRows();
  }

  /** Scroll so the row of `seq` is visible. */
  scrollToSeq(seq: number): void {
    const index = this.items.findIndex(it => it.kind === 'row' && it.event.seq === seq);
    if (index < 0) {
      return;
    }
    const top = index * ROW_HEIGHT;
    const list = this.node;
    if (top < list.scrollTop || top + ROW_HEIGHT > list.scrollTop + list.clientHeight) {
      list.scrollTop = Math.max(0, top - list.clientHeight / 2);
    }
    this.renderRows();
  }

  /**
   * Keeps DOM rows for the visible window only. Rows that stay visible are
   * reused rather than rebuilt, so a click is never lost to a redraw between
   * its mousedown and mouseup.
   */
  private renderRows(): void {
    const list = this.node;
    const state = this.state;
    if (this.rowsFor !== this.items) {
      for (const node of this.rowNodes.values()) {
        node.remove();
      }
      this.rowNodes.clear();
      this.rowsFor = this.items;
    }
    if (!state) {
      return;
    }
    const height = list.clientHeight || 300;
    const first = Math.max(0, Math.floor(list.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(this.items.length, Math.ceil((list.scrollTop + height) / ROW_HEIGHT) + OVERSCAN);
    for (const [index, node] of this.rowNodes) {
      if (index < first || index >= last) {
        node.remove();
        this.rowNodes.delete(index);
      }
    }
    // Rows that stay are never moved (moving a node between mousedown and
    // mouseup would swallow the click); new ones go in before their successor,
    // so document order still follows the list (screen readers, tab order).
    const kept = [...this.rowNodes.keys()].sort((a, b) => a - b);
    let next = 0;
    for (let i = first; i < last; i++) {
      const item = this.items[i];
      const existing = this.rowNodes.get(i);
      if (existing) {
        if (item.kind === 'row') {
          existing.classList.toggle('ipr-selected', state.selected === item.event.seq);
          this.markUnavailable(existing, item.event);
        }
        continue;
      }
      while (next < kept.length && kept[next] < i) {
        next++;
      }
      const row = item.kind === 'header' ? headerRow(item) : this.eventRow(item.event, state);
      row.style.top = `${i * ROW_HEIGHT}px`;
      this.rowNodes.set(i, row);
      const before = next < kept.length ? this.rowNodes.get(kept[next]) ?? null : null;
      list.insertBefore(row, before);
    }
  }

  private eventRow(event: TimelineEvent, state: ViewState): HTMLDivElement {
    const row = el('div', 'ipr-row');
    row.setAttribute('role', 'listitem');
    row.dataset.seq = String(event.seq);
    row.dataset.cellId = event.cell_id;
    row.dataset.outcome = event.outcome;
    if (state.selected === event.seq) {
      row.classList.add('ipr-selected');
    }
    this.markUnavailable(row, event);
    const saved = event.saved ? `saved ${formatDuration(event.saved)}` : '';
    row.append(
      outcomeDot(event.outcome),
      el('span', 'ipr-col-cell', event.cell_id),
      el('span', 'ipr-col-time', formatClock(event.started)),
      el('span', 'ipr-col-duration', formatDuration(event.duration)),
      el('span', 'ipr-col-saved', saved),
      el('span', 'ipr-col-bytes', formatBytes(event.bytes)),
      el('span', `ipr-col-outcome ipr-outcome-${event.outcome}`, event.outcome)
    );
    row.addEventListener('click', () => this.select(event.seq));
    return row;
  }

  /** A row whose checkpoint is gone stays on the timeline, greyed, and says why. */
  private markUnavailable(row: HTMLElement, event: TimelineEvent): void {
    const gone = this.index.isGone(event);
    row.classList.toggle('ipr-unavailable', gone);
    row.dataset.unavailable = String(gone);
    row.title =
      `${event.cell_id} · ${event.outcome} · checkpoint ${this.index.shortId(event.checkpoint_id)}` +
      (gone ? ' · no longer in the store (gc, deleted or untrusted)' : '');
  }
}
