// Package keys owns ddtop's key bindings and their help text.
package keys

import "github.com/charmbracelet/bubbles/key"

// KeyMap is every binding ddtop answers. It implements help.KeyMap.
type KeyMap struct {
	NextView key.Binding
	Ranks    key.Binding
	Vars     key.Binding
	Detail   key.Binding
	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Enter    key.Binding
	Back     key.Binding
	Sort     key.Binding
	Reverse  key.Binding
	Filter   key.Binding
	Pause    key.Binding
	Exited   key.Binding // show or hide the ranks that exited a while ago
	Help     key.Binding
	Quit     key.Binding
	// Replay only (ddtop replay): step and seek through the recording.
	StepBack, StepFwd, SeekBack, SeekFwd, Start, End key.Binding

	replay bool
}

// Default is ddtop's key map.
func Default() KeyMap {
	return KeyMap{
		NextView: key.NewBinding(key.WithKeys("tab", "shift+tab"), key.WithHelp("tab", "view")),
		Ranks:    key.NewBinding(key.WithKeys("1"), key.WithHelp("1", "ranks")),
		Vars:     key.NewBinding(key.WithKeys("2"), key.WithHelp("2", "variables")),
		Detail:   key.NewBinding(key.WithKeys("3"), key.WithHelp("3", "rank detail")),
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+u"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+d"), key.WithHelp("pgdn", "page down")),
		Enter:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "drill in")),
		Back:     key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Sort:     key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "sort")),
		Reverse:  key.NewBinding(key.WithKeys("S"), key.WithHelp("S", "reverse")),
		Filter:   key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Pause:    key.NewBinding(key.WithKeys("p", " "), key.WithHelp("p", "pause")),
		Exited:   key.NewBinding(key.WithKeys("X"), key.WithHelp("X", "show exited")),
		Help:     key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:     key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		StepBack: key.NewBinding(key.WithKeys(","), key.WithHelp(",", "step back")),
		StepFwd:  key.NewBinding(key.WithKeys("."), key.WithHelp(".", "step")),
		SeekBack: key.NewBinding(key.WithKeys("<", "left"), key.WithHelp("<", "seek -10%")),
		SeekFwd:  key.NewBinding(key.WithKeys(">", "right"), key.WithHelp(">", "seek +10%")),
		Start:    key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g", "start")),
		End:      key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G", "end")),
	}
}

// ShowingExited sets the help of the Exited key to what it does next.
func (k *KeyMap) ShowingExited(shown bool) {
	if shown {
		k.Exited.SetHelp("X", "hide exited")
	} else {
		k.Exited.SetHelp("X", "show exited")
	}
}

// Replay is the key map of ddtop replay: Default with the seek keys in its help.
func Replay() KeyMap {
	k := Default()
	k.replay = true
	return k
}

// ShortHelp is the one-line help under every page.
func (k KeyMap) ShortHelp() []key.Binding {
	if k.replay {
		return []key.Binding{k.NextView, k.Enter, k.Back, k.Pause, k.StepFwd, k.StepBack, k.SeekFwd, k.SeekBack, k.Help, k.Quit}
	}
	return []key.Binding{k.NextView, k.Enter, k.Back, k.Sort, k.Filter, k.Pause, k.Help, k.Quit}
}

// FullHelp is the help shown with '?'.
func (k KeyMap) FullHelp() [][]key.Binding {
	h := [][]key.Binding{
		{k.NextView, k.Ranks, k.Vars, k.Detail},
		{k.Up, k.Down, k.PageUp, k.PageDown},
		{k.Enter, k.Back, k.Sort, k.Reverse},
		{k.Filter, k.Pause, k.Exited, k.Help, k.Quit},
	}
	if k.replay {
		h = append(h, []key.Binding{k.StepFwd, k.StepBack, k.SeekFwd, k.SeekBack, k.Start, k.End})
	}
	return h
}
