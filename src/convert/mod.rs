//! JSON record bytes → Arrow columns (see DESIGN.md "Value rules").
