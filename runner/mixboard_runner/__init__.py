"""mixboard_runner: runs models through the mixboard registry; home of the ``mixboard`` CLI."""
