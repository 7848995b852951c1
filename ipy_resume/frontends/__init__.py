"""The adapters: IPython magics, the side panel's comm and server
extension, the widget, the CLI, headless and papermill runs, and the wire protocol
they share.  Thin: each parses, calls the engine or the store, and prints.
"""
