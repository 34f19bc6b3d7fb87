package main

import (
	"flag"
	"fmt"
	"os"
)

// runCheck reads back every record of the archive and says what is
// damaged: exit 0 when nothing is, 1 when something is (or the archive
// cannot be read).
func runCheck(args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	c := common{access: accessReadOnly}
	c.register(fs)
	_, store, code := c.open(fs, args)
	if store == nil {
		return code
	}
	defer store.Close()
	rep, err := store.Check()
	if err != nil {
		return fail("check", fmt.Errorf("%s: %w", c.data, err))
	}
	fmt.Fprintf(os.Stdout, "records  %d read back\nevents   %d\nverdicts %d\ndamaged  %d\n", rep.Records, rep.Events, rep.Verdicts, rep.Damaged)
	for _, d := range rep.First {
		fmt.Fprintf(os.Stdout, "  %v\n", d)
	}
	if rep.Damaged > len(rep.First) {
		fmt.Fprintf(os.Stdout, "  and %d more\n", rep.Damaged-len(rep.First))
	}
	if rep.Damaged > 0 {
		return fail("check", fmt.Errorf("%s: %d damaged records, %d event ids affected; `archiver repair --data %s` fetches their bodies again", c.data, rep.Damaged, len(rep.DamagedIDs), c.data))
	}
	return 0
}
