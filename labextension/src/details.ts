/**
 * The details pane of the selected event: what it did, what its checkpoint
 * stored (names, types, shapes, sizes, key parts), and the restore (asked to
 * confirm first) and go-to-cell buttons.
 */

import { SnapshotIndex, el, factRow, outcomeColour } from './dom';
import { formatBytes, formatClock, formatDay, formatDuration, formatShape } from './format';
import { TimelineEvent, ViewState, findEvent } from './types';

export interface DetailsActions {
  restore(event: TimelineEvent): void;
  goToCell(event: TimelineEvent): void;
}

function namesTable(names: Record<string, Record<string, unknown>>): HTMLElement {
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

function keyPartsTable(parts: Record<string, unknown>): HTMLElement {
  const list = el('table', 'ipr-facts ipr-key-parts');
  for (const [k, v] of Object.entries(parts)) {
    const text = (typeof v === 'string' ? v : JSON.stringify(v)) || '—';
    list.append(factRow(k, text.length > 80 ? `${text.slice(0, 79)}…` : text));
  }
  return list;
}

/**
 * The pane; redrawn whole on every `update` (it holds a few dozen nodes at most).
 *
 * ```ts
 * const pane = new DetailsPane({ restore, goToCell });
 * parent.append(pane.node);
 * pane.update(state, new SnapshotIndex(state.snapshot));
 * ```
 */
export class DetailsPane {
  readonly node: HTMLDivElement;
  private readonly actions: DetailsActions;
  private state: ViewState | null = null;
  private index = new SnapshotIndex(null);
  /** The seq whose restore waits for the user's confirmation. */
  private confirming: number | null = null;

  constructor(actions: DetailsActions) {
    this.actions = actions;
    this.node = el('div', 'ipr-details');
  }

  update(state: ViewState, index: SnapshotIndex): void {
    if (this.state && state.selected !== this.state.selected) {
      this.confirming = null;
    }
    this.state = state;
    this.index = index;
    this.render();
  }

  private render(): void {
    const state = this.state!;
    const node = this.node;
    node.replaceChildren();
    const event = findEvent(state.snapshot, state.selected);
    if (!event) {
      node.append(el('div', 'ipr-hint', 'Select an event to see what it stored.'));
      return;
    }
    const title = el('div', 'ipr-details-title');
    const badge = el('span', 'ipr-badge', event.outcome);
    badge.style.background = outcomeColour(event.outcome);
    title.append(el('b', 'ipr-details-cell', event.cell_id), badge);
    node.append(title, this.facts(event), this.buttons(event, state));

    const details = state.details;
    if (details.state === 'loading') {
      node.append(el('div', 'ipr-hint', 'Loading details…'));
    } else if (details.state === 'error') {
      node.append(el('div', 'ipr-error', details.error));
    } else if (details.state === 'ready' && details.seq === event.seq) {
      node.append(namesTable(details.details.names ?? {}));
      const parts = details.details.key_parts;
      if (parts && Object.keys(parts).length) {
        node.append(el('div', 'ipr-subtitle', 'Key parts'), keyPartsTable(parts));
      }
    } else if (event.names.length) {
      node.append(el('div', 'ipr-hint', `Names: ${event.names.join(', ')}`));
    }
  }

  // Tables, not <dl> grids: notebook pages style definition lists their own way.
  private facts(event: TimelineEvent): HTMLTableElement {
    const facts = el('table', 'ipr-facts');
    const fact = (label: string, value: string) => {
      facts.append(factRow(label, value));
    };
    const gone = this.index.isGone(event) ? ' — gone: removed by gc, deleted or untrusted' : '';
    fact('checkpoint', this.index.shortId(event.checkpoint_id) + gone);
    fact('when', `${formatDay(event.started)} ${formatClock(event.started)}`);
    fact(event.outcome === 'restored' ? 'restore took' : 'run took', formatDuration(event.duration));
    if (event.saved) {
      fact('time saved', formatDuration(event.saved));
    }
    fact('written', formatBytes(event.bytes));
    if (event.detail) {
      fact('detail', event.detail);
    }
    return facts;
  }

  private buttons(event: TimelineEvent, state: ViewState): HTMLDivElement {
    const actions = el('div', 'ipr-actions');
    const gone = this.index.isGone(event);
    const restorable = Boolean(event.checkpoint_id) && event.outcome !== 'failed' && !gone;
    if (this.confirming === event.seq) {
      const question = el(
        'div',
        'ipr-confirm-text',
        `Restore the kernel to checkpoint ${this.index.shortId(event.checkpoint_id)} of '${event.cell_id}'? ` +
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
        this.render();
      });
      actions.append(question, yes, no);
      return actions;
    }
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
      this.render();
    });
    actions.append(restore);
    if (state.canGoToCell) {
      const go = el('button', 'ipr-button ipr-goto', 'Go to cell');
      go.addEventListener('click', () => this.actions.goToCell(event));
      actions.append(go);
    }
    return actions;
  }
}
