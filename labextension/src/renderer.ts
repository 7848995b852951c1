/**
 * The timeline's DOM renderer, shared by the side panel and the notebook widget.
 *
 * It knows nothing about JupyterLab, comms or HTTP: a host gives it a
 * `ViewState` and a set of actions, and it draws. That is what lets esbuild
 * bundle the same file for anywidget while the lab extension bundles it too.
 *
 * Three parts: a canvas strip (time axis, marks sized by bytes, colour by
 * outcome, hover details), a virtualised list of rows grouped by kernel session
 * (only the visible rows exist in the DOM, so 10,000 events stay cheap), and a
 * details pane with the restore and go-to-cell buttons.
 */

import {
  formatBytes,
  formatClock,
  formatDay,
  formatDuration,
  formatPercent,
  formatShape,
  shortId
} from './format';
import { Snapshot, TimelineEvent, ViewState } from './types';

export interface TimelineActions {
  select(seq: number | null): void;
  restore(event: TimelineEvent): void;
  goToCell(event: TimelineEvent): void;
  refresh(): void;
}

export const OUTCOME_COLOURS: Record<string, string> = {
  executed: '#2f6fbd',
  restored: '#2e9e57',
  resumed: '#7a4fb5',
  incomplete: '#e08a1e',
  unsaved: '#c8611a',
  failed: '#c83b3b',
  uncached: '#8a8f98'
};

const ROW_HEIGHT = 26;
const OVERSCAN = 8;
const STRIP_HEIGHT = 72;
// Gaps longer than this between two events are drawn as a break, so days
// between sessions do not squeeze every mark into one corner.
const GAP_CAP_S = 120;

type Item = { kind: 'header'; session: string; first: TimelineEvent; count: number } | { kind: 'row'; event: TimelineEvent };

interface Mark {
  x: number;
  y: number;
  r: number;
  event: TimelineEvent;
}

function el<K extends keyof HTMLElementTagNameMap>(
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

function factRow(label: string, value: string): HTMLTableRowElement {
  const row = el('tr');
  row.append(el('th', undefined, label), el('td', undefined, value || '—'));
  return row;
}

function outcomeColour(outcome: string): string {
  return OUTCOME_COLOURS[outcome] ?? OUTCOME_COLOURS.uncached;
}

function isRestoreLane(outcome: string): boolean {
  return outcome === 'restored' || outcome === 'resumed';
}

/**
 * Draws a timeline into `host` and redraws on every `update`.
 *
 * ```ts
 * const view = new TimelineRenderer(div, actions);
 * view.update(state);
 * ```
 */
export class TimelineRenderer {
  readonly node: HTMLDivElement;
  private readonly actions: TimelineActions;
  private readonly statusNode: HTMLDivElement;
  private readonly summaryNode: HTMLDivElement;
  private readonly stripNode: HTMLDivElement;
  private readonly canvas: HTMLCanvasElement;
  private readonly tooltip: HTMLDivElement;
  private readonly listNode: HTMLDivElement;
  private readonly spacer: HTMLDivElement;
  private readonly detailsNode: HTMLDivElement;
  private readonly noticeNode: HTMLDivElement;
  private state: ViewState | null = null;
  private items: Item[] = [];
  private itemsFor: Snapshot | null = null;
  private unavailable = new Set<string>();

  /** The displayed prefix of an id, as the kernel sent it with the snapshot. */
  private shortId(id: string | null): string {
    return shortId(id, this.state?.snapshot?.short_ids);
  }
  private marks: Mark[] = [];
  private rowNodes = new Map<number, HTMLDivElement>();
  private readonly maxListHeight: number | null;
  private rowsFor: Item[] | null = null;
  private confirming: number | null = null;
  private stickToBottom = true;
  private resizeObserver: ResizeObserver | null = null;
  private frame = 0;

  /**
   * `maxListHeight`: grow the list with its rows up to this many pixels (the
   * widget, inside a notebook); without it the list fills its container (the panel).
   */
  constructor(host: HTMLElement, actions: TimelineActions, options: { maxListHeight?: number } = {}) {
    this.actions = actions;
    this.maxListHeight = options.maxListHeight ?? null;
    this.node = el('div', 'ipr-timeline');
    this.statusNode = el('div', 'ipr-status');
    this.summaryNode = el('div', 'ipr-summary');
    this.stripNode = el('div', 'ipr-strip');
    this.canvas = el('canvas', 'ipr-canvas');
    this.canvas.height = STRIP_HEIGHT;
    this.tooltip = el('div', 'ipr-tooltip');
    this.tooltip.style.display = 'none';
    this.stripNode.append(this.canvas, this.tooltip, this.legend());
    this.listNode = el('div', 'ipr-list');
    this.listNode.setAttribute('role', 'list');
    this.spacer = el('div', 'ipr-spacer');
    this.listNode.append(this.spacer);
    this.detailsNode = el('div', 'ipr-details');
    this.noticeNode = el('div', 'ipr-notice');
    this.node.append(
      this.statusNode,
      this.summaryNode,
      this.stripNode,
      this.listNode,
      this.noticeNode,
      this.detailsNode
    );
    host.append(this.node);

    this.listNode.addEventListener('scroll', () => {
      const list = this.listNode;
      this.stickToBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - ROW_HEIGHT;
      this.renderRows();
    });
    this.canvas.addEventListener('mousemove', ev => this.hover(ev));
    this.canvas.addEventListener('mouseleave', () => {
      this.tooltip.style.display = 'none';
    });
    this.canvas.addEventListener('click', ev => {
      const mark = this.markAt(ev);
      if (mark) {
        this.actions.select(mark.event.seq);
        this.scrollToSeq(mark.event.seq);
      }
    });
    if (typeof ResizeObserver !== 'undefined') {
      this.resizeObserver = new ResizeObserver(() => this.schedule());
      this.resizeObserver.observe(this.node);
    }
  }

  dispose(): void {
    this.resizeObserver?.disconnect();
    cancelAnimationFrame(this.frame);
    this.node.remove();
  }

  update(state: ViewState): void {
    if (this.state && state.selected !== this.state.selected) {
      this.confirming = null;
    }
    this.state = state;
    if (state.snapshot !== this.itemsFor) {
      this.itemsFor = state.snapshot;
      this.items = buildItems(state.snapshot?.events ?? []);
      this.unavailable = new Set(state.snapshot?.unavailable ?? []);
    }
    this.renderStatus();
    this.renderSummary();
    this.renderNotice();
    this.renderDetails();
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    if (this.maxListHeight !== null) {
      const wanted = Math.max(ROW_HEIGHT * 3, this.items.length * ROW_HEIGHT + 2);
      this.listNode.style.height = `${Math.min(this.maxListHeight, wanted)}px`;
    }
    if (this.stickToBottom) {
      this.listNode.scrollTop = this.listNode.scrollHeight;
    }
    this.renderRows();
    this.schedule();
  }

  /** Scroll the list so the row of `seq` is visible. */
  scrollToSeq(seq: number): void {
    const index = this.items.findIndex(it => it.kind === 'row' && it.event.seq === seq);
    if (index < 0) {
      return;
    }
    const top = index * ROW_HEIGHT;
    const list = this.listNode;
    if (top < list.scrollTop || top + ROW_HEIGHT > list.scrollTop + list.clientHeight) {
      list.scrollTop = Math.max(0, top - list.clientHeight / 2);
    }
    this.renderRows();
  }

  private schedule(): void {
    cancelAnimationFrame(this.frame);
    this.frame = requestAnimationFrame(() => this.drawStrip());
  }

  private legend(): HTMLDivElement {
    const legend = el('div', 'ipr-legend');
    for (const outcome of ['executed', 'restored', 'resumed', 'incomplete', 'failed']) {
      const item = el('span', 'ipr-legend-item');
      const dot = el('span', 'ipr-dot');
      dot.style.background = outcomeColour(outcome);
      item.append(dot, document.createTextNode(outcome));
      legend.append(item);
    }
    const size = el('span', 'ipr-legend-item', 'size = bytes written');
    legend.append(size);
    return legend;
  }

  private renderStatus(): void {
    const state = this.state!;
    const node = this.statusNode;
    node.replaceChildren();
    node.dataset.status = state.status;
    node.className = `ipr-status ipr-status-${state.status}`;
    const text = el('span', 'ipr-status-text', state.statusText);
    node.append(text);
    if (state.status === 'not-loaded') {
      const code = el('code', 'ipr-load-line', '%load_ext ipy_resume');
      node.append(code);
    }
    const refresh = el('button', 'ipr-button ipr-refresh', '↻');
    refresh.title = 'Refresh the timeline';
    refresh.addEventListener('click', () => this.actions.refresh());
    node.append(refresh);
  }

  private renderSummary(): void {
    const snap = this.state!.snapshot;
    const node = this.summaryNode;
    node.replaceChildren();
    if (!snap) {
      return;
    }
    if (!snap.exists && !snap.events.length) {
      node.append(el('span', 'ipr-empty', 'No checkpoints yet: run a %%checkpoint cell.'));
      return;
    }
    const s = snap.summary;
    const parts: [string, string, string][] = [
      ['checkpoints', String(s.checkpoints), 'checkpoints'],
      ['bytes', formatBytes(s.bytes), 'stored'],
      ['hit-rate', formatPercent(s.hit_rate), 'hit rate'],
      ['time-saved', formatDuration(s.time_saved), 'saved'],
      ['events', String(s.events), 'events']
    ];
    for (const [key, value, label] of parts) {
      const part = el('span', `ipr-stat ipr-stat-${key}`);
      part.append(el('b', undefined, value), document.createTextNode(` ${label}`));
      node.append(part);
    }
  }

  private renderNotice(): void {
    const notice = this.state!.notice;
    const node = this.noticeNode;
    node.replaceChildren();
    node.className = notice ? `ipr-notice ipr-notice-${notice.kind}` : 'ipr-notice';
    if (notice) {
      node.textContent = notice.text;
    }
  }

  private selectedEvent(): TimelineEvent | null {
    const state = this.state!;
    if (state.selected === null || !state.snapshot) {
      return null;
    }
    const events = state.snapshot.events;
    // Events arrive ordered by seq, so a binary search finds the selection.
    let lo = 0;
    let hi = events.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const seq = events[mid].seq;
      if (seq === state.selected) {
        return events[mid];
      }
      if (seq < state.selected) {
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return null;
  }

  private renderDetails(): void {
    const state = this.state!;
    const node = this.detailsNode;
    node.replaceChildren();
    const event = this.selectedEvent();
    if (!event) {
      node.append(el('div', 'ipr-hint', 'Select an event to see what it stored.'));
      return;
    }
    const title = el('div', 'ipr-details-title');
    const badge = el('span', 'ipr-badge', event.outcome);
    badge.style.background = outcomeColour(event.outcome);
    title.append(el('b', 'ipr-details-cell', event.cell_id), badge);
    node.append(title);

    // Tables, not <dl> grids: notebook pages style definition lists their own way.
    const facts = el('table', 'ipr-facts');
    const fact = (label: string, value: string) => {
      facts.append(factRow(label, value));
    };
    fact(
      'checkpoint',
      this.shortId(event.checkpoint_id) + (this.isUnavailable(event) ? ' — gone: removed by gc, deleted or untrusted' : '')
    );
    fact('when', `${formatDay(event.started)} ${formatClock(event.started)}`);
    fact(event.outcome === 'restored' ? 'restore took' : 'run took', formatDuration(event.duration));
    if (event.saved) {
      fact('time saved', formatDuration(event.saved));
    }
    fact('written', formatBytes(event.bytes));
    if (event.detail) {
      fact('detail', event.detail);
    }
    node.append(facts);

    const actions = el('div', 'ipr-actions');
    const gone = this.isUnavailable(event);
    const restorable = Boolean(event.checkpoint_id) && event.outcome !== 'failed' && !gone;
    if (this.confirming === event.seq) {
      const question = el(
        'div',
        'ipr-confirm-text',
        `Restore the kernel to checkpoint ${this.shortId(event.checkpoint_id)} of '${event.cell_id}'? ` +
          'Names recorded up to it take their values then; names created by later checkpoints are removed.'
      );
      const yes = el('button', 'ipr-button ipr-primary ipr-confirm', 'Restore');
      yes.addEventListener('click', () => {
        this.confirming = null;
        this.actions.restore(event);
      });
      const no = el('button', 'ipr-button ipr-cancel', 'Cancel');
      no.addEventListener('click', () => {
        this.confirming = null;
        this.renderDetails();
      });
      actions.append(question, yes, no);
    } else {
      const restore = el('button', 'ipr-button ipr-primary ipr-restore', 'Restore kernel to here');
      restore.disabled = !state.canRestore || !restorable || state.restoring;
      restore.title = gone
        ? 'This checkpoint is no longer in the store (removed by gc, deleted or untrusted)'
        : !restorable
          ? 'This event has no checkpoint to restore'
          : state.canRestore
          ? 'Rebuild the kernel state as of this checkpoint'
          : 'Needs a live kernel with ipy_resume loaded';
      restore.addEventListener('click', () => {
        this.confirming = event.seq;
        this.renderDetails();
      });
      actions.append(restore);
      if (state.canGoToCell) {
        const go = el('button', 'ipr-button ipr-goto', 'Go to cell');
        go.addEventListener('click', () => this.actions.goToCell(event));
        actions.append(go);
      }
    }
    node.append(actions);

    const details = state.details;
    if (details.state === 'loading') {
      node.append(el('div', 'ipr-hint', 'Loading details…'));
    } else if (details.state === 'error') {
      node.append(el('div', 'ipr-error', details.error));
    } else if (details.state === 'ready' && details.seq === event.seq) {
      node.append(this.namesTable(details.details.names ?? {}));
      const parts = details.details.key_parts;
      if (parts && Object.keys(parts).length) {
        node.append(el('div', 'ipr-subtitle', 'Key parts'));
        const list = el('table', 'ipr-facts ipr-key-parts');
        for (const [k, v] of Object.entries(parts)) {
          const text = (typeof v === 'string' ? v : JSON.stringify(v)) || '—';
          list.append(factRow(k, text.length > 80 ? `${text.slice(0, 79)}…` : text));
        }
        node.append(list);
      }
    } else if (event.names.length) {
      node.append(el('div', 'ipr-hint', `Names: ${event.names.join(', ')}`));
    }
  }

  private namesTable(names: Record<string, Record<string, unknown>>): HTMLElement {
    const table = el('table', 'ipr-names');
    const head = el('tr');
    for (const h of ['name', 'type', 'shape', 'size', 'stored as']) {
      head.append(el('th', undefined, h));
    }
    table.append(head);
    const entries = Object.entries(names);
    if (!entries.length) {
      const row = el('tr');
      const cell = el('td', 'ipr-hint', 'no names stored');
      cell.colSpan = 5;
      row.append(cell);
      table.append(row);
    }
    for (const [name, info] of entries) {
      const row = el('tr', 'ipr-name-row');
      row.dataset.name = name;
      const shape = formatShape(info.shape) + (info.dtype ? ` ${String(info.dtype)}` : '');
      const size = typeof info.bytes === 'number' ? formatBytes(info.bytes) : '';
      row.append(
        el('td', 'ipr-name', name),
        el('td', undefined, String(info.type ?? '')),
        el('td', undefined, shape),
        el('td', undefined, size),
        el('td', undefined, String(info.stored_as ?? ''))
      );
      table.append(row);
    }
    return table;
  }

  /**
   * Keeps DOM rows for the visible window only. Rows that stay visible are
   * reused rather than rebuilt, so a click is never lost to a redraw between
   * its mousedown and mouseup.
   */
  private renderRows(): void {
    const list = this.listNode;
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
      const row = item.kind === 'header' ? this.headerRow(item) : this.eventRow(item.event, state);
      row.style.top = `${i * ROW_HEIGHT}px`;
      this.rowNodes.set(i, row);
      const before = next < kept.length ? this.rowNodes.get(kept[next]) ?? null : null;
      list.insertBefore(row, before);
    }
  }

  private headerRow(item: Extract<Item, { kind: 'header' }>): HTMLDivElement {
    const row = el('div', 'ipr-session');
    row.dataset.session = item.session;
    row.textContent = `kernel session ${item.session.slice(0, 8)} · ${formatDay(item.first.started)} ${formatClock(item.first.started)} · ${item.count} event${item.count === 1 ? '' : 's'}`;
    return row;
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
    const dot = el('span', 'ipr-dot');
    dot.style.background = outcomeColour(event.outcome);
    const saved = event.saved ? `saved ${formatDuration(event.saved)}` : '';
    row.append(
      dot,
      el('span', 'ipr-col-cell', event.cell_id),
      el('span', 'ipr-col-time', formatClock(event.started)),
      el('span', 'ipr-col-duration', formatDuration(event.duration)),
      el('span', 'ipr-col-saved', saved),
      el('span', 'ipr-col-bytes', formatBytes(event.bytes)),
      el('span', `ipr-col-outcome ipr-outcome-${event.outcome}`, event.outcome)
    );
    row.addEventListener('click', () => this.actions.select(event.seq));
    return row;
  }

  private isUnavailable(event: TimelineEvent): boolean {
    return event.checkpoint_id !== null && this.unavailable.has(event.checkpoint_id);
  }

  /** A row whose checkpoint is gone stays on the timeline, greyed, and says why. */
  private markUnavailable(row: HTMLElement, event: TimelineEvent): void {
    const gone = this.isUnavailable(event);
    row.classList.toggle('ipr-unavailable', gone);
    row.dataset.unavailable = String(gone);
    row.title =
      `${event.cell_id} · ${event.outcome} · checkpoint ${this.shortId(event.checkpoint_id)}` +
      (gone ? ' · no longer in the store (gc, deleted or untrusted)' : '');
  }

  private drawStrip(): void {
    const canvas = this.canvas;
    const width = Math.max(120, this.stripNode.clientWidth || 300);
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(STRIP_HEIGHT * ratio);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${STRIP_HEIGHT}px`;
    const ctx = canvas.getContext('2d');
    if (!ctx) {
      return;
    }
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, STRIP_HEIGHT);
    const events = this.state?.snapshot?.events ?? [];
    this.marks = layoutMarks(events, width);
    canvas.dataset.marks = String(this.marks.length);
    const style = getComputedStyle(this.node);
    const fg = style.getPropertyValue('--jp-ui-font-color2').trim() || '#666';
    const line = style.getPropertyValue('--jp-border-color2').trim() || '#ddd';

    // Lanes: runs above, restores below, on one shared time axis.
    ctx.strokeStyle = line;
    ctx.lineWidth = 1;
    for (const y of [LANE_RUN, LANE_RESTORE]) {
      ctx.beginPath();
      ctx.moveTo(PAD_LEFT, y);
      ctx.lineTo(width - PAD_RIGHT, y);
      ctx.stroke();
    }
    ctx.fillStyle = fg;
    ctx.font = '10px sans-serif';
    ctx.textBaseline = 'middle';
    ctx.fillText('run', 4, LANE_RUN);
    ctx.fillText('restore', 4, LANE_RESTORE);
    if (!events.length) {
      ctx.fillText('no events yet', PAD_LEFT + 8, (LANE_RUN + LANE_RESTORE) / 2);
      return;
    }

    // Breaks where time was compressed, and clock labels spread along the axis.
    ctx.textBaseline = 'alphabetic';
    let lastLabelX = -Infinity;
    for (let i = 0; i < this.marks.length; i++) {
      const mark = this.marks[i];
      const prev = i > 0 ? this.marks[i - 1].event : null;
      const isBreak = prev !== null && mark.event.started - prev.started > GAP_CAP_S;
      if (isBreak) {
        const bx = (this.marks[i - 1].x + mark.x) / 2;
        ctx.strokeStyle = fg;
        ctx.beginPath();
        ctx.moveTo(bx - 2, AXIS_Y - 4);
        ctx.lineTo(bx + 1, AXIS_Y + 4);
        ctx.moveTo(bx + 1, AXIS_Y - 4);
        ctx.lineTo(bx + 4, AXIS_Y + 4);
        ctx.stroke();
      }
      if (mark.x - lastLabelX > 70 && mark.x < width - 40) {
        ctx.fillStyle = fg;
        const label = isBreak || i === 0 ? `${formatDay(mark.event.started).slice(5)} ${formatClock(mark.event.started).slice(0, 5)}` : formatClock(mark.event.started).slice(0, 5);
        ctx.fillText(label, mark.x, AXIS_Y + 10);
        lastLabelX = mark.x;
      }
    }

    const lastMark = this.marks[this.marks.length - 1];
    if (this.marks.length > 1 && width - PAD_RIGHT - lastLabelX > 110) {
      ctx.fillStyle = fg;
      ctx.textAlign = 'right';
      ctx.fillText(formatClock(lastMark.event.started).slice(0, 5), width - PAD_RIGHT, AXIS_Y + 10);
      ctx.textAlign = 'left';
    }

    const selected = this.state?.selected ?? null;
    ctx.globalAlpha = this.marks.length > 2000 ? 0.5 : 0.8;
    for (const mark of this.marks) {
      ctx.fillStyle = outcomeColour(mark.event.outcome);
      ctx.beginPath();
      ctx.arc(mark.x, mark.y, mark.r, 0, Math.PI * 2);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
    const chosen = selected === null ? undefined : this.marks.find(m => m.event.seq === selected);
    if (chosen) {
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.arc(chosen.x, chosen.y, chosen.r + 3, 0, Math.PI * 2);
      ctx.stroke();
    }
  }

  private markAt(ev: MouseEvent): Mark | null {
    const rect = this.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left;
    const y = ev.clientY - rect.top;
    // Marks are sorted by x: binary search, then look at the neighbours.
    let lo = 0;
    let hi = this.marks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.marks[mid].x < x) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    let best: Mark | null = null;
    let bestDist = Infinity;
    for (let i = Math.max(0, lo - 30); i < Math.min(this.marks.length, lo + 30); i++) {
      const m = this.marks[i];
      const d = Math.hypot(m.x - x, m.y - y);
      if (d <= Math.max(m.r, 5) + 3 && d < bestDist) {
        best = m;
        bestDist = d;
      }
    }
    return best;
  }

  private hover(ev: MouseEvent): void {
    const mark = this.markAt(ev);
    if (!mark) {
      this.tooltip.style.display = 'none';
      this.canvas.style.cursor = 'default';
      return;
    }
    const e = mark.event;
    this.canvas.style.cursor = 'pointer';
    this.tooltip.replaceChildren(
      el('b', undefined, e.cell_id),
      el('div', undefined, `${e.outcome} · ${formatDay(e.started)} ${formatClock(e.started)}`),
      el('div', undefined, `${e.outcome === 'restored' ? 'restore' : 'run'} ${formatDuration(e.duration)}${e.saved ? ` · saved ${formatDuration(e.saved)}` : ''}`),
      el('div', undefined, `${formatBytes(e.bytes)} written · checkpoint ${this.shortId(e.checkpoint_id)}`)
    );
    this.tooltip.style.display = 'block';
    const stripWidth = this.stripNode.clientWidth;
    const left = Math.min(mark.x + 10, Math.max(0, stripWidth - 220));
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${mark.y + 10}px`;
  }
}

const PAD_LEFT = 48;
const PAD_RIGHT = 14;
const LANE_RUN = 18;
const LANE_RESTORE = 42;
const AXIS_Y = 54;

function buildItems(events: TimelineEvent[]): Item[] {
  const items: Item[] = [];
  let header: Extract<Item, { kind: 'header' }> | null = null;
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

/**
 * Positions on the strip: time runs left to right, with long idle gaps capped
 * so that each session gets room; radius grows with the square root of bytes
 * so a mark's area tracks what was written.
 */
export function layoutMarks(events: TimelineEvent[], width: number): Mark[] {
  if (!events.length) {
    return [];
  }
  const offsets: number[] = new Array(events.length);
  let total = 0;
  offsets[0] = 0;
  for (let i = 1; i < events.length; i++) {
    const delta = Math.max(0, events[i].started - events[i - 1].started);
    total += Math.min(delta, GAP_CAP_S);
    offsets[i] = total;
  }
  let maxBytes = 0;
  for (const e of events) {
    maxBytes = Math.max(maxBytes, e.bytes || 0);
  }
  const span = width - PAD_LEFT - PAD_RIGHT;
  // Dense timelines get smaller marks, so thousands of events stay a readable texture.
  const perMark = span / events.length;
  const minR = perMark < 2 ? 1.5 : 3;
  const growR = Math.max(1, Math.min(7, perMark * 1.5));
  const marks: Mark[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    const x = total > 0 ? PAD_LEFT + (offsets[i] / total) * span : PAD_LEFT + span / 2;
    const r = minR + (maxBytes > 0 ? growR * Math.sqrt((e.bytes || 0) / maxBytes) : 0);
    marks.push({ x, y: isRestoreLane(e.outcome) ? LANE_RESTORE : LANE_RUN, r, event: e });
  }
  // Equal timestamps keep seq order, so the array stays sorted by x.
  return marks;
}
