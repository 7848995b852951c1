/**
 * The side panel: a Lumino widget that hosts the shared renderer and wires
 * its buttons to the model.
 */

import { Widget } from '@lumino/widgets';

import { TimelineRenderer } from './renderer';
import { ITimelineModel } from './tokens';
import { ViewState } from './types';

export class TimelinePanel extends Widget {
  private readonly model: ITimelineModel;
  private readonly renderer: TimelineRenderer;

  constructor(model: ITimelineModel) {
    super();
    this.model = model;
    this.addClass('ipr-panel');
    const header = document.createElement('div');
    header.className = 'ipr-panel-header';
    header.textContent = 'Checkpoint timeline';
    this.node.append(header);
    this.renderer = new TimelineRenderer(this.node, {
      select: seq => model.select(seq),
      restore: event => void model.restore(event),
      goToCell: event => void model.goToCell(event),
      refresh: () => void model.refresh()
    });
    model.stateChanged.connect(this.onState, this);
    this.renderer.update(model.state);
  }

  dispose(): void {
    this.model.stateChanged.disconnect(this.onState, this);
    this.renderer.dispose();
    super.dispose();
  }

  protected onAfterShow(): void {
    this.renderer.update(this.model.state);
  }

  private onState(_: ITimelineModel, state: ViewState): void {
    if (this.isVisible) {
      this.renderer.update(state);
    }
  }
}
