from atomdyn_launchers.evidence.cli import main

raise SystemExit(main())
