"""What deploytool shows: the rich renderings of each command's typed answer (render, render_server),
the progress lines (progress), the tail views, the report page. Imports no operation: it is handed
typed answers and draws them."""
