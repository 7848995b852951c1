/**
 * The timeline's DOM renderer, shared by the side panel and the notebook widget.
 *
 * It knows nothing about JupyterLab, comms or HTTP: a host gives it a
 * `ViewState` and a set of actions, and it draws. That is what lets esbuild
 * bundle the same file for anywidget while the lab extension bundles it too.
 *
 * From top to bottom: the status line, the summary, the time strip (strip.ts),
 * the event list (list.ts), the last notice and the details pane (details.ts).
 */

import { DetailsPane } from './details';
import { SnapshotIndex, el } from './dom';
import { formatBytes, formatDuration, formatPercent } from './format';
import { EventList } from './list';
import { TimeStrip } from './strip';
import { TimelineEvent, ViewState } from './types';

export interface TimelineActions {
  select(seq: number | null): void;
  restore(event: TimelineEvent): void;
  goToCell(event: TimelineEvent): void;
  refresh(): void;
}

function renderStatus(node: HTMLElement, state: ViewState, refresh: () => void): void {
  node.replaceChildren();
  node.dataset.status = state.status;
  node.className = `ipr-status ipr-status-${state.status}`;
  node.append(el('span', 'ipr-status-text', state.statusText));
  if (state.status === 'not-loaded') {
    node.append(el('code', 'ipr-load-line', '%load_ext ipy_resume'));
  }
  const button = el('button', 'ipr-button ipr-refresh', '↻');
  button.title = 'Refresh the timeline';
  button.addEventListener('click', refresh);
  node.append(button);
}

function renderSummary(node: HTMLElement, state: ViewState): void {
  const snap = state.snapshot;
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

function renderNotice(node: HTMLElement, state: ViewState): void {
  const notice = state.notice;
  node.replaceChildren();
  node.className = notice ? `ipr-notice ipr-notice-${notice.kind}` : 'ipr-notice';
  if (notice) {
    node.textContent = notice.text;
  }
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
  private readonly noticeNode: HTMLDivElement;
  private readonly strip: TimeStrip;
  private readonly list: EventList;
  private readonly details: DetailsPane;
  private index = new SnapshotIndex(null);

  /**
   * `maxListHeight`: grow the list with its rows up to this many pixels (the
   * widget, inside a notebook); without it the list fills its container (the panel).
   */
  constructor(host: HTMLElement, actions: TimelineActions, options: { maxListHeight?: number } = {}) {
    this.actions = actions;
    this.node = el('div', 'ipr-timeline');
    this.statusNode = el('div', 'ipr-status');
    this.summaryNode = el('div', 'ipr-summary');
    this.noticeNode = el('div', 'ipr-notice');
    this.strip = new TimeStrip(seq => {
      actions.select(seq);
      this.list.scrollToSeq(seq);
    });
    this.list = new EventList(seq => actions.select(seq), { maxHeight: options.maxListHeight });
    this.details = new DetailsPane(actions);
    this.node.append(
      this.statusNode,
      this.summaryNode,
      this.strip.node,
      this.list.node,
      this.noticeNode,
      this.details.node
    );
    host.append(this.node);
  }

  dispose(): void {
    this.strip.dispose();
    this.node.remove();
  }

  update(state: ViewState): void {
    if (state.snapshot !== this.index.snapshot) {
      this.index = new SnapshotIndex(state.snapshot);
    }
    renderStatus(this.statusNode, state, () => this.actions.refresh());
    renderSummary(this.summaryNode, state);
    renderNotice(this.noticeNode, state);
    this.details.update(state, this.index);
    this.list.update(state, this.index);
    this.strip.update(state, this.index);
  }

  /** Scroll the list so the row of `seq` is visible. */
  scrollToSeq(seq: number): void {
    this.list.scrollToSeq(seq);
  }
}
